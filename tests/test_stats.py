"""Bootstrap intervals of success rates (pure logic)."""

from __future__ import annotations

import pytest

from seal_graph.stats import (
    bootstrap_ci,
    holm,
    paired_difference_ci,
    seeds_and_tasks_ci,
    sign_flip_p,
)


def test_interval_of_a_constant_is_that_constant() -> None:
    assert bootstrap_ci([1.0] * 20) == (1.0, 1.0)
    assert bootstrap_ci([0.0] * 5) == (0.0, 0.0)


def test_interval_brackets_the_mean_and_narrows_with_more_tasks() -> None:
    small = [1.0] * 4 + [0.0] * 4
    large = small * 16
    low, high = bootstrap_ci(small)
    assert 0.0 <= low < 0.5 < high <= 1.0
    low_l, high_l = bootstrap_ci(large)
    assert low < low_l < 0.5 < high_l < high
    # binomial standard error at n=128, p=0.5 is 0.044: the 95% half-width is ~0.087
    assert 0.06 < (high_l - low_l) / 2 < 0.11


def test_interval_is_reproducible_and_seeded() -> None:
    values = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    assert bootstrap_ci(values, seed=3) == bootstrap_ci(values, seed=3)


def test_paired_difference_uses_common_tasks_only() -> None:
    before = {"a": 0.0, "b": 0.0, "c": 1.0, "d": 0.0}
    after = {"a": 1.0, "b": 1.0, "c": 1.0, "e": 1.0}
    mean, (low, high) = paired_difference_ci(after, before)
    assert mean == pytest.approx(2 / 3)
    assert 0.0 <= low <= mean <= high <= 1.0


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one task"):
        bootstrap_ci([])
    with pytest.raises(ValueError, match="share no task"):
        paired_difference_ci({"a": 1.0}, {"b": 0.0})


def test_seed_and_task_interval_widens_with_seed_disagreement() -> None:
    tasks = [f"t{i}" for i in range(40)]
    agree = [{t: float(i % 2) for i, t in enumerate(tasks)} for _ in range(3)]
    mean, (low, high) = seeds_and_tasks_ci(agree)
    assert mean == 0.5 and low < 0.5 < high  # task sampling alone leaves an interval
    spread = [{t: v for t in tasks} for v in (0.0, 0.5, 1.0)]  # every task, seeds differ
    mean, (low, high) = seeds_and_tasks_ci(spread)
    assert mean == 0.5 and high - low > 0.3  # seed noise is in the interval
    one = seeds_and_tasks_ci([{t: 1.0 for t in tasks}])
    assert one == (1.0, (1.0, 1.0))
    with pytest.raises(ValueError, match="no task"):
        seeds_and_tasks_ci([{"a": 1.0}, {"b": 0.0}])


def test_seed_permutation_test_is_exact_and_bounded_by_the_seeds() -> None:
    assert sign_flip_p([0.1, 0.2, 0.05, 0.3, 0.15]) == pytest.approx(2 / 32)  # all positive
    assert sign_flip_p([0.1, -0.1, 0.1, -0.1]) == 1.0  # no difference on average
    mixed = sign_flip_p([0.3, 0.2, -0.05, 0.25, 0.1])
    assert 2 / 32 < mixed < 0.5
    with pytest.raises(ValueError, match="at least one"):
        sign_flip_p([])


def test_holm_steps_down_and_keeps_the_order() -> None:
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.5})
    assert adjusted == pytest.approx({"a": 0.04, "b": 0.09, "c": 0.09, "d": 0.5})
    assert holm({"only": 0.2}) == {"only": 0.2}
