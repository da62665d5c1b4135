"""Where a model keeps position: probes of its hidden states, and how its heads read the first token.

- ``hidden_states``: the residual stream after the embeddings and after each block.
- ``linear_probe_r2`` and ``mlp_probe_r2``: how much of a target (a token's position, say) a linear map
  or a one-hidden-layer network reads from features, as R² on held-out rows (rows are whole windows, so
  no window is split between fitting and scoring).
- ``position_probes``: both probes, for position and for ``log(1 + position)``, at every layer. Run them
  on an untrained model of the same shape too: the causal mask alone puts some position into the hidden
  states at initialisation (Chi et al. 2023), so what training adds is the difference.
- ``first_token_ratio``: per layer and head, the mean over queries of ``weight on token 0 x (i + 1)``.
  A head that attends evenly over its ``i + 1`` keys gives 1 (the counting layer of Kazemnejad et al.
  2023 reads ``1 / (i + 1)`` off a BOS token this way), a sink gives far more, a head that ignores the
  first token gives about 0.
"""

from __future__ import annotations

import torch

from ._validate import check_int, check_tensor


@torch.no_grad()
def hidden_states(model: torch.nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    """The residual stream of a ``TransformerLM``: ``[embeddings, after block 1, ...]``, each
    ``[batch, seq, dim]`` (before the final norm)."""
    check_tensor("tokens", tokens, min_dim=2)
    model.eval()
    x = model.token_embedding(tokens.to(next(model.parameters()).device))
    if model.absolute is not None:
        x = model.absolute(x)
    states = [x]
    for block in model.blocks:
        x = block(x)
        states.append(x)
    return states


def _split(features: torch.Tensor, targets: torch.Tensor):
    """Windows ``[windows, seq, dim]`` and ``[windows, seq]`` -> float64 rows of the first and second half
    of the windows: ``(x_fit, y_fit, x_test, y_test)``."""
    half = features.shape[0] // 2
    if half < 1:
        raise ValueError(f"need at least 2 windows to fit and score a probe, got {features.shape[0]}")
    x, y = features.double(), targets.double()
    return x[:half].flatten(0, 1), y[:half].flatten(), x[half:].flatten(0, 1), y[half:].flatten()


def _r2(predicted: torch.Tensor, target: torch.Tensor) -> float:
    return float(1 - (predicted - target).pow(2).sum() / (target - target.mean()).pow(2).sum())


def linear_probe_r2(features: torch.Tensor, targets: torch.Tensor, *, ridge: float = 1e-3) -> float:
    """Held-out R² of a ridge regression from ``features [windows, seq, dim]`` to ``targets [windows, seq]``,
    fitted on the first half of the windows and scored on the second (float64; features standardised on
    the fitting half; ``ridge`` times the number of fitting rows on the diagonal)."""
    x_fit, y_fit, x_test, y_test = _split(features, targets)
    mean, std = x_fit.mean(0), x_fit.std(0).clamp_min(1e-8)
    x_fit, x_test = (x_fit - mean) / std, (x_test - mean) / std
    ones = torch.ones(len(x_fit), 1, dtype=torch.float64)
    a = torch.cat([x_fit, ones], 1)
    gram = a.T @ a + ridge * len(a) * torch.eye(a.shape[1], dtype=torch.float64)
    weights = torch.linalg.solve(gram, a.T @ (y_fit - y_fit.mean()))
    predicted = torch.cat([x_test, torch.ones(len(x_test), 1, dtype=torch.float64)], 1) @ weights + y_fit.mean()
    return _r2(predicted, y_test)


def mlp_probe_r2(features: torch.Tensor, targets: torch.Tensor, *, hidden: int = 64, steps: int = 400,
                 lr: float = 1e-2, seed: int = 0) -> float:
    """Held-out R² of a one-hidden-layer ReLU network (``hidden`` units, Adam, up to ``steps`` full-batch
    steps on standardised features and targets), scored on the windows ``linear_probe_r2`` scores. Early
    stopping: the last fifth of the fitting windows is kept aside, and the network is taken at the step
    where its loss there was lowest (without it a network this size fits noise when the signal is weak,
    and scores below the linear probe)."""
    x_all, y_all, x_test, y_test = (t.float() for t in _split(features, targets))
    fit_rows = (features.shape[0] // 2 - max(1, features.shape[0] // 10)) * features.shape[1]
    if fit_rows <= 0:
        raise ValueError(f"need at least 4 windows for an MLP probe, got {features.shape[0]}")
    x_fit, y_fit, x_val, y_val = x_all[:fit_rows], y_all[:fit_rows], x_all[fit_rows:], y_all[fit_rows:]
    mean, std = x_fit.mean(0), x_fit.std(0).clamp_min(1e-6)
    y_mean, y_std = y_fit.mean(), y_fit.std().clamp_min(1e-6)
    x_fit, x_val, x_test = ((x - mean) / std for x in (x_fit, x_val, x_test))
    generator = torch.Generator().manual_seed(seed)
    dim = x_fit.shape[1]
    params = [(torch.randn(dim, hidden, generator=generator) / dim ** 0.5).requires_grad_(),
              torch.zeros(hidden, requires_grad=True),
              (torch.randn(hidden, 1, generator=generator) / hidden ** 0.5).requires_grad_(),
              torch.zeros(1, requires_grad=True)]

    def predict(x):
        w1, b1, w2, b2 = params
        return (torch.relu(x @ w1 + b1) @ w2 + b2)[:, 0] * y_std + y_mean

    optimizer = torch.optim.Adam(params, lr=lr)
    best, best_params = float("inf"), [p.detach().clone() for p in params]
    with torch.enable_grad():
        for _ in range(check_int("steps", steps)):
            loss = (predict(x_fit) - y_fit).div(y_std).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                held = float((predict(x_val) - y_val).pow(2).mean())
            if held < best:
                best, best_params = held, [p.detach().clone() for p in params]
    with torch.no_grad():
        for p, kept in zip(params, best_params):
            p.copy_(kept)
        predicted = predict(x_test)
    return _r2(predicted.double(), y_test.double())


TARGETS = {"position": lambda p: p.double(), "log position": lambda p: torch.log1p(p.double())}


def position_probes(model: torch.nn.Module, tokens: torch.Tensor, *, skip: int = 0) -> dict:
    """``{target: {"linear": [R² per layer], "mlp": [...]}}`` for each target of ``TARGETS``, layer 0 being
    the embeddings; positions from ``skip`` on (``tokens`` ``[windows, seq]``, at least 2 windows)."""
    states = hidden_states(model, tokens)
    positions = torch.arange(skip, tokens.shape[1]).expand(tokens.shape[0], -1)
    out = {}
    for name, target in TARGETS.items():
        y = target(positions)
        out[name] = {"linear": [linear_probe_r2(s[:, skip:].cpu(), y) for s in states],
                     "mlp": [mlp_probe_r2(s[:, skip:].cpu(), y) for s in states]}
    return out


@torch.no_grad()
def first_token_ratio(model: torch.nn.Module, tokens: torch.Tensor, *, skip: int = 16) -> list[list[float]]:
    """``[layer][head]``: the mean over queries ``i >= skip`` of the weight on token 0 times ``i + 1``
    (1 for even attention, as a counting head attends; far above 1 for a sink; about 0 for a head that
    ignores token 0). ``tokens`` is ``[batch, seq]``."""
    from .evaluate import first_token_attention  # the weights, query by query
    shares = first_token_attention(model, tokens, skip=skip, reduce=False)  # [layer] of [heads, queries]
    scale = torch.arange(skip, tokens.shape[1], dtype=torch.float64) + 1
    return [[float((head.double() * scale).mean()) for head in layer] for layer in shares]
