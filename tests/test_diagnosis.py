"""Turn-level diagnosis on replayed ground truth and crafted wrong trajectories."""

from __future__ import annotations

import asyncio

import pytest

from seal_graph.diagnosis import diagnose_episode, label_statistics, paper_tag
from seal_graph.environment import Task
from seal_graph.records import Episode, ToolEvent, TurnEvidence, TurnRecord
from seal_graph.reference import replay_calls
from seal_graph.registry import get_environment
from seal_graph.tools.kv_calc import make_env


def labels_of(env, task, calls) -> list[str]:
    episode, _ = asyncio.run(replay_calls(env, task, calls))
    return [d.label for d in diagnose_episode(episode, task)]


@pytest.fixture(scope="module")
def bfcl():
    return get_environment("bfcl")


def test_replayed_bfcl_ground_truth_is_all_pass(bfcl) -> None:
    tasks = [
        t
        for c in ("base", "miss_func", "miss_param", "long_context")
        for t in bfcl.tasks("test")
        if t.metadata["category"] == c
    ][::20]
    for task in tasks:
        labels = labels_of(bfcl, task, task.reference)
        expected = ["correct_abstention" if not ref else "pass" for ref in task.reference]
        assert labels == expected, task.id


def test_wrong_argument_is_argument_mismatch(bfcl) -> None:
    task = bfcl.task("multi_turn_base_0")
    calls = [list(turn) for turn in task.reference]
    calls[0] = [dict(c) for c in calls[0]]
    calls[0][1] = {"name": "mkdir", "args": {"dir_name": "tmp"}}  # reference: 'temp'
    assert labels_of(bfcl, task, calls)[0] == "argument_mismatch"


def test_unknown_tool_is_invalid_tool_call(bfcl) -> None:
    task = bfcl.task("multi_turn_base_0")
    calls = [list(turn) for turn in task.reference]
    calls[1] = [{"name": "search_file", "args": {"pattern": "budget"}}]
    labels = labels_of(bfcl, task, calls)
    assert labels[1] == "invalid_tool_call" and labels[0] == "pass"


def test_skipped_call_is_missing_tool_call(bfcl) -> None:
    task = bfcl.task("multi_turn_base_0")
    calls = [list(turn) for turn in task.reference]
    calls[2] = []
    assert labels_of(bfcl, task, calls)[2] == "missing_tool_call"


def test_call_on_a_turn_that_needed_none_is_spurious(bfcl) -> None:
    task = next(
        t
        for t in bfcl.tasks("test")
        if t.metadata["category"] == "miss_param" and any(not ref for ref in t.reference)
    )
    empty = next(i for i, ref in enumerate(task.reference) if not ref)
    calls = [list(turn) for turn in task.reference]
    calls[empty] = [task.reference[empty + 1][0]]  # acts before the user gave the value
    assert labels_of(bfcl, task, calls)[empty] == "spurious_tool_call"


def test_unrecovered_error_is_recovery_failure() -> None:
    env = make_env()
    task = env.tasks("test")[0]
    calls = [list(turn) for turn in task.reference]
    calls[1] = [{"name": "get_value", "args": {"key": "no_such_key"}}]  # raises, never fixed
    labels = labels_of(env, task, calls)
    assert labels[0] == "pass" and labels[1] == "recovery_failure"


def test_wrong_state_without_wrong_arguments_is_state_mismatch() -> None:
    env = make_env()
    task = env.tasks("test")[0]
    calls = [list(turn) for turn in task.reference]
    calls[0] = [*calls[0], {"name": "set_value", "args": {"key": "extra", "value": 1}}]
    assert labels_of(env, task, calls)[0] == "state_mismatch"


def test_label_statistics() -> None:
    env = make_env()
    tasks = env.tasks("test")[:4]
    pairs = []
    for task in tasks:
        episode, _ = asyncio.run(replay_calls(env, task, [[] for _ in task.turns]))
        pairs.append((episode, diagnose_episode(episode, task)))
    stats = label_statistics(pairs)
    assert set(stats) == {"missing_tool_call"}
    turns = sum(len(t.turns) for t in tasks)
    assert stats["missing_tool_call"].count == turns
    assert stats["missing_tool_call"].prevalence == 1.0
    assert stats["missing_tool_call"].mean_reward == 0.0


def tags_of(env, task, calls) -> list[str | None]:
    episode, _ = asyncio.run(replay_calls(env, task, calls))
    return [d.tag for d in diagnose_episode(episode, task)]


@pytest.mark.parametrize(
    ("evidence", "called", "tag"),
    [
        ({"expects_calls": False}, False, "correct_abstention"),
        ({"expects_calls": False, "pass": True}, False, "correct_abstention"),
        ({"expects_calls": False}, True, "spurious_tool_call"),
        ({"expects_calls": False, "pass": False}, False, "correct_abstention"),  # inherited
        (
            {"expects_calls": False, "expects_reply": True, "pass": False},
            False,
            "response_mismatch",
        ),
        ({"expects_calls": True, "pass": False}, False, "empty_turn_model_response"),
        ({"expects_calls": True, "pass": True}, True, "pass"),
        ({"pass": False, "state": {"a": 1}, "expected_state": {"a": 2}}, True, "state_mismatch"),
        (
            {"pass": False, "expects_reply": True, "state": {}, "expected_state": {}},
            True,
            "response_mismatch",
        ),
        ({"tag": "instance_mismatch"}, True, "instance_mismatch"),  # the verifier's own
        ({}, True, None),  # no verdict, no expectation: untagged
    ],
)
def test_the_papers_tag_follows_from_the_evidence(evidence, called, tag) -> None:
    event = ToolEvent(
        turn=0, step=0, call_id="c", name="list_keys", arguments={}, status="ok", output="[]"
    )
    assert paper_tag(TurnEvidence.model_validate(evidence), [event] if called else []) == tag


def test_kv_calc_turns_get_the_papers_tags() -> None:
    env = make_env()
    task = next(t for t in env.tasks("test") if t.metadata["category"] == "miss_param")
    empty = next(i for i, ref in enumerate(task.reference) if not ref)
    assert tags_of(env, task, task.reference)[empty] == "correct_abstention"
    acting = [list(turn) for turn in task.reference]
    acting[empty] = [task.reference[empty + 1][0]]  # acts before the value was given
    tags = tags_of(env, task, acting)
    assert tags[empty] == "spurious_tool_call"
    silent = [list(turn) for turn in task.reference]
    silent[empty + 1] = []  # the value came and the agent did nothing
    assert tags_of(env, task, silent)[empty + 1] == "empty_turn_model_response"


@pytest.mark.parametrize(
    ("arguments", "label"),
    [("normalised", "argument_mismatch"), ("effect", "response_mismatch")],
)
def test_arguments_compared_by_effect_are_no_mismatch_when_the_state_is_right(
    arguments, label
) -> None:
    """A SQL-style turn: another query text than the reference's, the same database state,
    but the answer was wrong."""
    query = "SELECT price FROM items WHERE name = 'pen'"
    evidence = TurnEvidence(turn=0, passed=False, state={"rows": 3}, expected_state={"rows": 3})
    episode = Episode(
        episode_id="e",
        run_id="r",
        env="shop",
        task_id="t",
        sample_index=0,
        messages=[],
        tool_events=[
            ToolEvent(
                turn=0,
                step=0,
                call_id="c",
                name="sql_db_query",
                arguments={"query": query.lower()},
                status="ok",
                output="[(2.5,)]",
            )
        ],
        turns=[TurnRecord(index=0, user_message="What does a pen cost?", evidence=evidence)],
    )
    task = Task(id="t", turns=["What does a pen cost?"], reference=[[
        {"name": "sql_db_query", "args": {"query": query}}
    ]])  # fmt: skip
    assert diagnose_episode(episode, task, arguments)[0].label == label
