"""Argument checks shared by the posenc modules.

Every public function validates its inputs with these helpers so that bad input fails loudly with a
message that names the argument and says what is allowed, instead of producing a silently wrong tensor.
"""

from __future__ import annotations

import numbers

import torch


def check_int(name: str, value, *, minimum: int = 1) -> int:
    """Return ``value`` as an int, or raise if it is not an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return int(value)


def check_even(name: str, value) -> int:
    """Return ``value`` as an int, or raise if it is not a positive even integer."""
    value = check_int(name, value)
    if value % 2:
        raise ValueError(f"{name} must be a positive even integer, got {value}")
    return value


def check_positive_float(name: str, value) -> float:
    """Return ``value`` as a float, or raise if it is not a real number > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return float(value)


def check_choice(name: str, value, allowed) -> str:
    """Raise unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {sorted(allowed)}, got {value!r}")
    return value


def check_tensor(name: str, value, *, min_dim: int = 0) -> torch.Tensor:
    """Raise unless ``value`` is a tensor with at least ``min_dim`` dimensions."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions, got shape {tuple(value.shape)}")
    return value


def check_integer_positions(name: str, positions: torch.Tensor) -> torch.Tensor:
    """Raise unless ``positions`` holds whole numbers (an integer dtype, or floats with no fraction)."""
    check_tensor(name, positions)
    if positions.is_floating_point() and not torch.equal(positions, positions.round()):
        raise ValueError(f"{name} must hold whole-number positions, got fractional values")
    if positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer or float tensor, got dtype {positions.dtype}")
    return positions
