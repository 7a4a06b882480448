"""The built-in kv-calc environment, composed from LangChain tools."""

from __future__ import annotations

import asyncio

from seal_graph.reference import replay_calls, replay_reference
from seal_graph.tools.kv_calc import make_env


def test_every_reference_solution_scores_one() -> None:
    env = make_env()

    async def all_tasks():
        splits = ("train", "test", "ood")
        return [await replay_reference(env, t) for s in splits for t in env.tasks(s)]

    verdicts = asyncio.run(all_tasks())
    # 64 per split: enough tasks for a success interval to separate methods
    assert len(verdicts) == 3 * 64 and all(v.reward == 1.0 for v in verdicts)


def test_the_ood_split_chains_both_operations_in_four_turns() -> None:
    env = make_env()
    for task in env.tasks("ood"):
        tools = {c["name"] for calls in task.reference for c in calls}
        assert len(task.turns) == 4 and {"add", "multiply"} <= tools
    for task in env.tasks("train"):  # training tasks never chain both
        tools = {c["name"] for calls in task.reference for c in calls}
        assert not {"add", "multiply"} <= tools


def test_wrong_value_or_skipped_turn_scores_zero() -> None:
    env = make_env()
    task = env.tasks("test")[0]
    wrong = [
        [
            {**c, "args": {**c["args"], "value": 12345}} if c["name"] == "set_value" else c
            for c in calls
        ]
        for calls in task.reference
    ]
    skipped = [[], *task.reference[1:]]
    for calls in (wrong, skipped):
        _, verdict = asyncio.run(replay_calls(env, task, calls))
        assert verdict.reward == 0.0
        assert verdict.turn_evidence[0].passed is False


def test_splits_differ_and_are_deterministic() -> None:
    first, second = make_env(), make_env()
    assert [t.turns for t in first.tasks("test")] == [t.turns for t in second.tasks("test")]
    assert {t.id for t in first.tasks("train")}.isdisjoint({t.id for t in first.tasks("test")})
