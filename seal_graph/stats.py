"""Intervals for success rates over tasks: percentile bootstrap, seeded.

Evaluation sets are small (tens of tasks), so a success rate alone cannot tell two
policies apart; its 95% interval says how much of a difference is noise. Tasks are the
unit resampled (a task's episodes stay together), and the paired version resamples the
same tasks for both runs, so a per-task comparison of two runs gets its own interval.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

RESAMPLES = 2000
"""Bootstrap resamples: percentile endpoints stable to ~0.01 on 30-100 tasks."""


def bootstrap_ci(
    values: Sequence[float], level: float = 0.95, seed: int = 0, resamples: int = RESAMPLES
) -> tuple[float, float]:
    """A `level` percentile-bootstrap interval of the mean of `values` (one per task)."""
    if not values:
        raise ValueError("no values: an interval needs at least one task")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = random.Random(seed)
    n = len(values)
    means = sorted(statistics.fmean(rng.choices(values, k=n)) for _ in range(resamples))
    tail = (1 - level) / 2
    low = means[round(tail * (resamples - 1))]
    high = means[round((1 - tail) * (resamples - 1))]
    return (low, high)


def paired_difference_ci(
    after: dict[str, float], before: dict[str, float], level: float = 0.95, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """Mean per-task difference `after - before` over the tasks both cover, and its
    interval (tasks resampled together in both runs)."""
    common = sorted(set(after) & set(before))
    if not common:
        raise ValueError("the two runs share no task: nothing to compare task by task")
    differences = [after[t] - before[t] for t in common]
    return statistics.fmean(differences), bootstrap_ci(differences, level, seed)


def seeds_and_tasks_ci(
    runs: Sequence[dict[str, float]], level: float = 0.95, seed: int = 0, resamples: int = RESAMPLES
) -> tuple[float, tuple[float, float]]:
    """Mean of per-task values over several runs (one dict task -> value per seed) and a
    two-level bootstrap interval: seeds resampled, then tasks (the same task draw for
    every seed), so the interval carries both seed and task-sampling noise. With
    per-task differences as the values it is a paired comparison."""
    if not runs:
        raise ValueError("no runs: an interval needs at least one seed")
    tasks = sorted(set.intersection(*(set(r) for r in runs)))
    if not tasks:
        raise ValueError("the runs share no task")
    table = [[r[t] for t in tasks] for r in runs]
    mean = statistics.fmean(v for row in table for v in row)
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        rows = rng.choices(table, k=len(table))
        columns = rng.choices(range(len(tasks)), k=len(tasks))
        means.append(statistics.fmean(row[c] for row in rows for c in columns))
    means.sort()
    tail = (1 - level) / 2
    return mean, (means[round(tail * (resamples - 1))], means[round((1 - tail) * (resamples - 1))])


def sign_flip_p(seed_differences: Sequence[float]) -> float:
    """Two-sided p-value of a paired permutation test at the seed level: under "no
    difference" each seed's mean paired difference is as likely negative as positive,
    so every sign assignment is enumerated (2^seeds; exact) and the share whose mean is
    at least as far from 0 as the observed one is the p-value. With 5 seeds the smallest
    possible p is 2/32 = 0.0625: seeds, not tasks, bound what this test can show."""
    if not seed_differences:
        raise ValueError("no seeds: a permutation test needs at least one")
    if len(seed_differences) > 20:
        raise ValueError("more than 20 seeds: enumerate a sample of sign flips instead")
    observed = abs(statistics.fmean(seed_differences))
    n = len(seed_differences)
    extreme = 0
    for mask in range(2**n):
        signs = [-1 if mask >> i & 1 else 1 for i in range(n)]
        flipped = statistics.fmean(s * d for s, d in zip(signs, seed_differences, strict=True))
        extreme += abs(flipped) >= observed - 1e-12
    return extreme / 2**n


def holm(pvalues: dict[str, float]) -> dict[str, float]:
    """Holm-Bonferroni adjusted p-values over a family of comparisons (step-down: the
    k-th smallest of m is multiplied by m - k + 1, kept monotone, capped at 1)."""
    order = sorted(pvalues, key=pvalues.__getitem__)
    adjusted: dict[str, float] = {}
    running = 0.0
    for rank, name in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * pvalues[name]))
        adjusted[name] = running
    return adjusted
