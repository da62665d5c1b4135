"""The few statistics the book's studies need: intervals over seeds and over evaluation windows.

- ``t_interval(values)``: mean and Student-t confidence interval, for a handful of seeds.
- ``paired_interval(a, b)``: the same for per-seed differences ``a[seed] - b[seed]``: every method in a
  study sees the same data order for a given seed, so pairing removes the seed-to-seed spread that the
  methods share.
- ``bootstrap_interval(values)``: percentile bootstrap of a mean, for many evaluation windows.

Plain Python and torch; no SciPy. The Student-t quantile is found by bisection on the t distribution's
CDF, integrated numerically (accurate to about 1e-6, far below what a 5-seed interval can resolve).
"""

from __future__ import annotations

import math
import statistics

import torch

from ._validate import check_int


def _check_level(level: float) -> float:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    return float(level)


def _t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with ``df`` degrees of freedom (x >= 0), by Simpson's rule."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def density(t: float) -> float:
        return math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))

    steps = 2000  # even
    h = x / steps
    total = density(0.0) + density(x)
    total += sum((4 if i % 2 else 2) * density(i * h) for i in range(1, steps))
    return 0.5 + total * h / 3


def t_quantile(probability: float, df: int) -> float:
    """The ``probability`` quantile of Student's t with ``df`` degrees of freedom (probability > 0.5).

    ``t_quantile(0.975, 4)`` is 2.776, the factor on the standard error of a 95% interval over 5 seeds.
    """
    df = check_int("df", df)
    if not 0.5 < probability < 1:
        raise ValueError(f"probability must be in (0.5, 1), got {probability}")
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < probability:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if _t_cdf(middle, df) < probability else (low, middle)
    return (low + high) / 2


def t_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``values`` and its Student-t confidence interval.

    With one value the interval is ``(mean, mean)``: there is no spread to estimate, and callers that
    assert on bounds should require at least two values.
    """
    level = _check_level(level)
    values = [float(v) for v in values]
    if not values:
        raise ValueError("values must not be empty")
    mean = statistics.fmean(values)
    if len(values) == 1:
        return mean, mean, mean
    half = t_quantile(0.5 + level / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def paired_interval(a: dict, b: dict, level: float = 0.95) -> tuple[float, float, float]:
    """``t_interval`` of ``a[key] - b[key]`` over the keys (seeds) both dicts have.

    Raises if they share fewer than two keys.
    """
    common = sorted(set(a) & set(b), key=str)
    if len(common) < 2:
        raise ValueError(f"a and b must share at least two keys (seeds), got {common}")
    return t_interval([float(a[key]) - float(b[key]) for key in common], level)


def bootstrap_interval(values, *, level: float = 0.95, n_resamples: int = 2000,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval ``(low, high)`` of the mean of ``values`` (a 1-D sequence).

    Each resample draws ``len(values)`` values with replacement; the interval holds the central
    ``level`` of the resampled means. Seeded, so the same values always give the same interval.
    """
    level = _check_level(level)
    n_resamples = check_int("n_resamples", n_resamples)
    values = torch.as_tensor(values, dtype=torch.float64).flatten()
    if values.numel() == 0:
        raise ValueError("values must not be empty")
    generator = torch.Generator().manual_seed(seed)
    draws = torch.randint(0, values.numel(), (n_resamples, values.numel()), generator=generator)
    means = values[draws].mean(dim=1)
    tail = (1 - level) / 2
    low, high = torch.quantile(means, torch.tensor([tail, 1 - tail], dtype=torch.float64))
    return float(low), float(high)


def paired_p_value(a: dict, b: dict) -> float:
    """Two-sided p-value of the paired t-test of ``a[key] - b[key] = 0`` over the keys both have (the
    test behind ``paired_interval``: 0 lies outside the 95% interval exactly when p < 0.05). Differences
    that are all equal give p = 1 if they are 0, else 0."""
    common = sorted(set(a) & set(b), key=str)
    if len(common) < 2:
        raise ValueError(f"a and b must share at least two keys (seeds), got {common}")
    differences = [float(a[key]) - float(b[key]) for key in common]
    spread = statistics.stdev(differences)
    if spread == 0:
        return 1.0 if statistics.fmean(differences) == 0 else 0.0
    t = abs(statistics.fmean(differences)) / (spread / math.sqrt(len(differences)))
    return max(0.0, 2 * (1 - _t_cdf(t, len(differences) - 1)))


def holm(p_values: dict, level: float = 0.05) -> dict:
    """Holm's step-down correction for many comparisons: ``{name: True}`` for those that stay
    significant at family-wise error ``level``. The smallest p is compared with ``level / m``, the next
    with ``level / (m - 1)``, and so on; the first that fails stops the rejections."""
    level = _check_level(level)
    order = sorted(p_values, key=p_values.get)
    kept, rejecting = {}, True
    for rank, name in enumerate(order):
        rejecting = rejecting and p_values[name] <= level / (len(order) - rank)
        kept[name] = rejecting
    return {name: kept[name] for name in p_values}


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed exactly (in log space)."""
    if p <= 0:
        return 1.0
    if p >= 1:
        return 1.0 if k >= n else 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    return min(1.0, sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                                 + i * log_p + (n - i) * log_q) for i in range(k + 1)))


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval ``(low, high)`` for a binomial proportion: the p whose
    tail probabilities of the observed count are ``(1 - level) / 2``. Unlike a t-interval it says
    something at 0 or n successes (0 of 512 still allows up to 0.72% at 95%), and it suits counts such
    as "3 of 5 seeds pass"."""
    trials = check_int("trials", trials)
    successes = check_int("successes", successes, minimum=0)
    if successes > trials:
        raise ValueError(f"successes must be <= trials={trials}, got {successes}")
    tail = (1 - _check_level(level)) / 2

    def solve(function, target):  # function of p, decreasing from 1 to 0 on (0, 1): bisection
        low, high = 0.0, 1.0
        for _ in range(60):
            middle = (low + high) / 2
            low, high = (middle, high) if function(middle) > target else (low, middle)
        return (low + high) / 2

    low = 0.0 if successes == 0 else solve(lambda p: _binomial_cdf(successes - 1, trials, p), 1 - tail)
    high = 1.0 if successes == trials else solve(lambda p: _binomial_cdf(successes, trials, p), tail)
    return low, high


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test (McNemar's exact test on paired yes/no outcomes): the p-value of
    ``wins`` against ``losses`` among the discordant pairs if each were a fair coin, ``2 P(X <= min)``
    for X ~ Binomial(wins + losses, 1/2), at most 1; 1 when there are none (ties carry no evidence)."""
    wins, losses = check_int("wins", wins, minimum=0), check_int("losses", losses, minimum=0)
    if wins + losses == 0:
        return 1.0
    return min(1.0, 2 * _binomial_cdf(min(wins, losses), wins + losses, 0.5))


def sign_flip_p(differences) -> float:
    """Two-sided exact sign-flip (permutation) test that paired differences are centred on 0: the share of
    the 2^n ways to flip their signs whose sum is at least as far from 0 as the observed one. Exact for
    small n (every flip is enumerated; n at most 20), and not liberal on counts or 0/1 outcomes as the
    t-test can be."""
    values = [float(v) for v in differences]
    if not 1 <= len(values) <= 20:
        raise ValueError(f"differences must hold 1 to 20 values, got {len(values)}")
    observed = abs(sum(values)) - 1e-9 * (1 + sum(abs(v) for v in values))  # ties count as extreme
    extreme = sum(abs(sum(v if mask >> i & 1 else -v for i, v in enumerate(values))) >= observed
                  for mask in range(2 ** len(values)))
    return extreme / 2 ** len(values)


def paired_family(pairs: dict, level: float = 0.05) -> dict:
    """A family of paired comparisons with Holm's correction over the whole family.

    ``pairs``: ``{label: (a, b)}``, each a ``{seed: value}`` dict. Returns ``{label: {"interval": 95%
    t-interval of a - b, "p": paired t-test p-value, "holm": True where the difference stays
    significant at family-wise ``level``}}``."""
    out = {label: {"interval": paired_interval(a, b), "p": paired_p_value(a, b)} for label, (a, b) in pairs.items()}
    kept = holm({label: row["p"] for label, row in out.items()}, level)
    for label, row in out.items():
        row["holm"] = kept[label]
    return out
