"""What every check shares: the failure it raises, tensor comparisons, and the diagnosis of known
mistakes."""

from __future__ import annotations

import torch


class ExerciseFailed(AssertionError):
    """A reader's answer differs from posenc's; the message says how."""



def _as_tensor(name: str, value, shape=None) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ExerciseFailed(f"{name} should return a torch.Tensor, got {type(value).__name__}")
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise ExerciseFailed(f"{name} should return shape {tuple(shape)}, got {tuple(value.shape)}")
    return value



def _close(a: torch.Tensor, b: torch.Tensor, tolerance: float, relative: float = 0.0) -> bool:
    """Same shape, finite, and ``|a - b| <= tolerance + relative * |b|`` everywhere."""
    if a.shape != b.shape or not bool(torch.isfinite(a).all()):
        return False
    a, b = a.double(), b.double()
    return bool(((a - b).abs() <= tolerance + relative * b.abs()).all())



def _as_numbers(name: str, value, n: int) -> torch.Tensor:
    """``n`` plain numbers (a tuple or list of floats, say) as a float64 tensor ``[n]``."""
    try:
        numbers = [float(v) for v in value]
    except (TypeError, ValueError):
        raise ExerciseFailed(f"{name} should return {n} numbers, got {value!r}") from None
    if len(numbers) != n:
        raise ExerciseFailed(f"{name} should return {n} numbers, got {len(numbers)}: {value!r}")
    return torch.tensor(numbers, dtype=torch.float64)



def _diagnose(name: str, answer: torch.Tensor, expected: torch.Tensor, known: dict, tolerance: float,
              relative: float = 0.0, where: torch.Tensor | None = None):
    """Raise ``ExerciseFailed``: the first known mistake whose output the answer matches (a mistake may
    map to a list of outputs, its forms), or the largest difference. With ``where`` (boolean, the shape of
    ``expected``) only those entries are compared."""
    known = {mistake: wrong if isinstance(wrong, list) else [wrong] for mistake, wrong in known.items()}
    if where is not None and answer.shape == expected.shape:
        answer, expected = (torch.where(where, t.double(), 0.0) for t in (answer, expected))
        known = {mistake: [torch.where(where, w.double(), 0.0) for w in forms] for mistake, forms in known.items()}
    for mistake, forms in known.items():
        if any(_close(answer, wrong, tolerance, relative) for wrong in forms):
            raise ExerciseFailed(f"{name}: {mistake}")
    if answer.shape != expected.shape:
        raise ExerciseFailed(f"{name}: shape {tuple(answer.shape)}, expected {tuple(expected.shape)}")
    difference = (answer.double() - expected.double()).abs()
    where = tuple(int(i) for i in torch.nonzero(difference == difference.max())[0])
    raise ExerciseFailed(f"{name}: differs from posenc by up to {float(difference.max()):.3g} (first at index "
                         f"{where}: yours {float(answer[where]):.6g}, expected {float(expected[where]):.6g})")



def _passed(name: str) -> bool:
    print(f"{name}: correct")
    return True



def _check_mask(name: str, answer, expected: torch.Tensor, extra: dict) -> None:
    answer = _as_tensor(name, answer, expected.shape)
    if answer.dtype != torch.bool:
        raise ExerciseFailed(f"{name}: return a boolean mask (True where the query may see the key), got "
                             f"{answer.dtype}; an additive mask of 0 and -inf is built from it afterwards")
    if not torch.equal(answer, expected):
        known = {"the mask is inverted: True should mark the keys a query may see": ~expected, **extra}
        for mistake, wrong in known.items():
            if torch.equal(answer, wrong):
                raise ExerciseFailed(f"{name}: {mistake}")
        i, j = (int(v) for v in torch.nonzero(answer != expected)[0])
        raise ExerciseFailed(f"{name}: query {i}, key {j} is {bool(answer[i, j])}, expected {bool(expected[i, j])}")

