"""Reading measurements: the paired interval over seeds (chapter 10) and the exact binomial interval
(chapter 11)."""

from __future__ import annotations

import math
import statistics

import torch

from ..stats import _binomial_cdf, clopper_pearson, paired_interval, t_interval, t_quantile
from ._common import _close, _as_numbers, _diagnose, _passed


# ---- chapter 10: paired intervals ----------------------------------------------------------------------

def _paired_mistakes(a: dict, b: dict, level: float) -> dict:
    """The usual wrong intervals for ``a[seed] - b[seed]``, each ``[3]`` (mean, low, high)."""
    seeds = sorted(set(a) & set(b))
    n, differences = len(seeds), [a[s] - b[s] for s in seeds]
    mean, t = statistics.fmean(differences), t_quantile(0.5 + level / 2, n - 1)
    z = statistics.NormalDist().inv_cdf(0.5 + level / 2)

    def around(half: float) -> torch.Tensor:
        return torch.tensor([mean, mean - half, mean + half], dtype=torch.float64)

    low, high = paired_interval(a, b, level)[1:]
    spread = math.sqrt(sum(statistics.variance([d[s] for s in seeds]) for d in (a, b)) / n)
    return {
        "the values are paired by their place in the dicts; pair a[seed] with b[seed], over the seeds both have":
            torch.tensor(t_interval([x - y for x, y in zip(a.values(), b.values())], level), dtype=torch.float64),
        "this is b - a; the interval is of a[seed] - b[seed]":
            torch.tensor([-mean, -high, -low], dtype=torch.float64),
        "the quantile is the normal one (1.96 at 95%); with n seeds it is Student's t with n - 1 degrees of "
        "freedom (posenc.stats.t_quantile(0.975, 4) = 2.776 for 5 seeds)":
            around(z * statistics.stdev(differences) / math.sqrt(n)),
        "the standard deviation divides by n (statistics.pstdev); the sample one divides by n - 1":
            around(t * statistics.pstdev(differences) / math.sqrt(n)),
        "unpaired: the spreads of a and of b add up; the interval of the per-seed differences removes the "
        "spread the two share through the seed": around(t * spread),
    }



def check_paired_interval(fn) -> bool:
    """``fn(a, b, level) -> (mean, low, high)``: the Student-t interval of ``a[seed] - b[seed]`` over the
    seeds both ``{seed: value}`` dicts have, as ``posenc.stats.paired_interval``."""
    shared = [0.62, 0.35, 0.81, 0.47, 0.70, 0.55]  # what a seed does to both methods
    a = {seed: shared[seed] + gain for seed, gain in enumerate([0.12, 0.08, 0.15, 0.05, 0.11])}
    b = {seed: shared[seed] for seed in (4, 2, 0, 3, 1, 5)}  # another order, and one seed more
    for a_, b_, level in ((a, b, 0.95), (a, dict(reversed(list(a.items()))), 0.9),
                          ({0: 1.0, 1: 1.4}, {1: 0.9, 0: 0.8}, 0.95)):
        expected = torch.tensor(paired_interval(a_, b_, level), dtype=torch.float64)
        answer = _as_numbers("the interval", fn(dict(a_), dict(b_), level), 3)
        if not _close(answer, expected, 1e-5, 1e-4):
            _diagnose(f"paired interval ({len(set(a_) & set(b_))} seeds, level {level})", answer, expected,
                      _paired_mistakes(a_, b_, level), 1e-5, 1e-4)
    return _passed("paired interval")



# ---- chapter 11: exact binomial intervals --------------------------------------------------------------

def _solve_decreasing(function, target: float) -> float:
    """The p in (0, 1) where ``function``, decreasing in p, equals ``target`` (bisection)."""
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if function(middle) > target else (low, middle)
    return (low + high) / 2



def check_clopper_pearson(fn) -> bool:
    """``fn(successes, trials, level) -> (low, high)``: the exact (Clopper-Pearson) interval of a binomial
    proportion, as ``posenc.stats.clopper_pearson``."""
    for k, n, level in ((2, 5, 0.95), (0, 5, 0.95), (5, 5, 0.95), (3, 10, 0.9), (0, 512, 0.95), (17, 40, 0.95)):
        expected = torch.tensor(clopper_pearson(k, n, level), dtype=torch.float64)
        answer = _as_numbers("the interval", fn(k, n, level), 2)
        if not _close(answer, expected, 1e-6):
            rate, z, tail = k / n, statistics.NormalDist().inv_cdf(0.5 + level / 2), (1 - level) / 2
            half = z * math.sqrt(rate * (1 - rate) / n)
            shifted = 0.0 if k == 0 else _solve_decreasing(lambda p: _binomial_cdf(k, n, p), 1 - tail)
            known = {"this is the normal (Wald) interval, p +- z sqrt(p (1 - p) / n): it shrinks to a point at 0 "
                     "or n successes; the exact interval solves the binomial tails":
                         torch.tensor([max(rate - half, 0.0), min(rate + half, 1.0)], dtype=torch.float64),
                     "each tail holds 1 - level; a two-sided interval leaves (1 - level) / 2 in each":
                         torch.tensor(clopper_pearson(k, n, 2 * level - 1), dtype=torch.float64),
                     "the lower bound is off by one: it is the p with P(X >= k) = (1 - level) / 2, that is "
                     "P(X <= k - 1) = 1 - (1 - level) / 2 (not P(X <= k))":
                         torch.tensor([shifted, float(expected[1])], dtype=torch.float64)}
            _diagnose(f"Clopper-Pearson interval ({k} of {n}, level {level})", answer, expected, known, 1e-6)
    return _passed("Clopper-Pearson interval")

