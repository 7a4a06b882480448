"""The built-in kv-calc environment, composed from LangChain tools, in BFCL's four
multi-turn categories."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from seal_graph.reference import replay_calls, replay_reference
from seal_graph.sessions import run_turn_calls
from seal_graph.tools.kv_calc import CATEGORIES, make_env


@pytest.fixture(scope="module")
def env():
    return make_env()


def test_every_split_holds_every_category_and_no_task_is_in_two_splits(env) -> None:
    assert env.splits() == ["train", "val", "test", "ood"]
    contents: dict[tuple, str] = {}
    for split in env.splits():
        tasks = env.tasks(split)
        wanted = {"ood": 64} if split == "ood" else dict.fromkeys(CATEGORIES, 64)
        assert Counter(t.metadata["category"] for t in tasks) == wanted
        for task in tasks:
            key = (*task.turns, str(task.metadata.get("initial_store")))
            assert contents.setdefault(key, split) == split, (task.id, contents[key])
    ids = [t.id for split in env.splits() for t in env.tasks(split)]
    assert len(ids) == len(set(ids))


def test_every_reference_solution_scores_one(env) -> None:
    async def all_tasks():
        return [await replay_reference(env, t) for s in env.splits() for t in env.tasks(s)]

    verdicts = asyncio.run(all_tasks())
    assert len(verdicts) == 3 * 4 * 64 + 64 and all(v.reward == 1.0 for v in verdicts)


def test_the_categories_are_what_bfcl_calls_them(env) -> None:
    for task in env.tasks("train"):
        category = task.metadata["category"]
        abstaining = [turn for turn, calls in enumerate(task.reference) if not calls]
        if category in ("miss_param", "miss_func"):
            (turn,) = abstaining  # one turn whose right response calls nothing...
            assert task.reference_replies[turn].endswith((".", "?"))  # ...and says why
            assert task.reference[turn + 1]  # the next turn makes up for it
        else:
            assert abstaining == []
        if category == "miss_func":  # the needed tool arrives the turn after
            ((at, (tool,)),) = task.tools_added_at_turn.items()
            assert at == abstaining[0] + 1 and tool in {c["name"] for c in task.reference[at]}
        if category == "long_context":
            assert len(task.metadata["initial_store"]) >= 20
    for task in env.tasks("ood"):
        tools = {c["name"] for calls in task.reference for c in calls}
        assert len(task.turns) == 4 and {"add", "multiply"} <= tools
    for task in env.tasks("train"):  # training tasks never chain both
        tools = {c["name"] for calls in task.reference for c in calls}
        assert not {"add", "multiply"} <= tools


def test_an_abstention_turn_passes_only_without_a_call(env) -> None:
    task = next(t for t in env.tasks("test") if t.metadata["category"] == "miss_param")
    turn = next(i for i, calls in enumerate(task.reference) if not calls)
    _, verdict = asyncio.run(replay_calls(env, task, task.reference))
    assert verdict.turn_evidence[turn].passed and verdict.turn_evidence[turn].expects_calls is False
    harmless = [{"name": "list_keys", "args": {}}]  # no state change, but a call
    acting = [*task.reference[:turn], harmless, *task.reference[turn + 1 :]]
    _, verdict = asyncio.run(replay_calls(env, task, acting))
    assert verdict.turn_evidence[turn].passed is False and verdict.reward == 0.0


def test_long_context_filler_must_stay_untouched(env) -> None:
    task = next(t for t in env.tasks("test") if t.metadata["category"] == "long_context")
    filler = next(iter(task.metadata["initial_store"]))
    clobber = [{"name": "set_value", "args": {"key": filler, "value": -1}}]
    _, verdict = asyncio.run(
        replay_calls(env, task, [task.reference[0] + clobber, *task.reference[1:]])
    )
    assert verdict.turn_evidence[0].passed is False


def test_wrong_value_or_skipped_turn_scores_zero(env) -> None:
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


def test_splits_are_deterministic() -> None:
    first, second = make_env(), make_env()
    for split in first.splits():
        assert [t.turns for t in first.tasks(split)] == [t.turns for t in second.tasks(split)]


def test_the_turn_check_agrees_with_the_verdict_turn_by_turn(env) -> None:
    """Evaluation stops at the first turn `turn_passed` fails: it must say what `verify`
    says of that turn, for the reference and for runs that skip a turn or act when the
    right response is to abstain."""
    for task in env.tasks("val")[::8]:
        acting = [calls or [{"name": "list_keys", "args": {}}] for calls in task.reference]
        for calls_per_turn in (task.reference, [[], *task.reference[1:]], acting):
            _, verdict = asyncio.run(replay_calls(env, task, calls_per_turn))
            session = env.open(task)
            for turn, calls in enumerate(calls_per_turn):
                steps = [(step, {"id": "x", **call}) for step, call in enumerate(calls)]
                events = [e for _, e in asyncio.run(run_turn_calls(session, env, turn, steps))]
                session.end_turn(turn, events)
                assert session.turn_passed(turn, events) == verdict.turn_evidence[turn].passed
