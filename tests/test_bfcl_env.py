"""The BFCL multi-turn environment: data, schemas, the verifier, isolation. No model."""

from __future__ import annotations

import asyncio
import collections

import pytest

from seal_graph.reference import replay_calls, replay_reference
from seal_graph.registry import get_environment
from seal_graph.tool_execution import execute_tool_call
from seal_graph.tools.bfcl import data
from seal_graph.tools.bfcl.schema import parameters_schema, parse_call, to_json_schema

# Turns whose ground truth breaks the tools BFCL itself publishes (a string for an
# integer ticket id; a held-out function used before it appears). Strict scoring tags
# them `gt_error` and leaves them out of the reward; official scoring runs them as
# BFCL's executor does (and they pass).
KNOWN_GT_ERRORS = {
    ("multi_turn_base_173", 3),
    ("multi_turn_long_context_173", 3),
    ("multi_turn_miss_param_173", 4),
    ("multi_turn_miss_func_173", 4),
    ("multi_turn_miss_func_49", 1),
}


@pytest.fixture(scope="module")
def env():
    return get_environment("bfcl")


def test_split_is_the_papers_400_400(env) -> None:
    train, test = env.tasks("train"), env.tasks("test")
    assert len(train) == len(test) == 400 and not {t.id for t in train} & {t.id for t in test}
    per_category = collections.Counter(t.metadata["category"] for t in test)
    assert per_category == dict.fromkeys(data.CATEGORIES, 100)


@pytest.mark.parametrize(
    ("name", "gt_error_turns"), [("bfcl", set()), ("bfcl-strict", KNOWN_GT_ERRORS)]
)
def test_replayed_ground_truth_scores_100_percent_in_every_category(name, gt_error_turns) -> None:
    env = get_environment(name)

    async def replay_all():
        return [(task, await replay_reference(env, task)) for task in env.tasks("all")]

    results = asyncio.run(replay_all())
    per_category = collections.Counter((t.metadata["category"], v.success) for t, v in results)
    assert per_category == {(c, True): 200 for c in data.CATEGORIES}
    gt_errors = {(t.id, turn) for t, v in results for turn in v.details["gt_error_turns"]}
    assert gt_errors == gt_error_turns


def _run(session, turn: int, name: str, args: dict):
    tools = {tool.name: tool for tool in session.executable_tools(turn)}
    call = {"id": "c", "name": name, "args": args}
    return asyncio.run(execute_tool_call(call, tools, turn=turn, step=0, timeout_s=10))[1]


def test_official_scoring_runs_what_bfcls_executor_runs_and_strict_does_not() -> None:
    """A number sent as a string reaches the backend (which converts it), and a held-out
    function runs before its turn; strict scoring rejects both before they run."""
    task_id = next(i for i, e in data.entries().items() if "TravelAPI" in e["involved_classes"])
    held_out_task = get_environment("bfcl").task("multi_turn_miss_func_0")
    ((turn, (held_out, *_)),) = held_out_task.tools_added_at_turn.items()
    for name, expected in (("bfcl", "ok"), ("bfcl-strict", "error")):
        env = get_environment(name)
        session = env.open(env.task(task_id))
        budget = _run(
            session, 0, "set_budget_limit", {"access_token": "x", "budget_limit": "20000.0"}
        )
        assert (budget.error_kind == "validation_error") == (expected == "error"), budget
        early = env.open(held_out_task)
        offered = {t.name for t in early.tools(turn - 1)}
        assert held_out not in offered  # offered as BFCL offers it, in both scorings
        event = _run(early, turn - 1, held_out, {})
        assert (event.error_kind == "unknown_tool") == (expected == "error"), event


@pytest.mark.parametrize("category", data.CATEGORIES)
def test_deliberately_wrong_calls_score_zero(env, category) -> None:
    tasks = [t for t in env.tasks("test") if t.metadata["category"] == category][:10]

    async def wrong(task):
        first = next(i for i, calls in enumerate(task.reference) if calls)
        skipped = [[] if i == first else calls for i, calls in enumerate(task.reference)]
        garbled = [
            [
                {
                    "name": c["name"],
                    "args": {
                        k: ("zz_wrong" if isinstance(v, str) else v) for k, v in c["args"].items()
                    },
                }
                for c in calls
            ]
            for calls in task.reference
        ]
        return (
            (await replay_calls(env, task, skipped))[1],
            (await replay_calls(env, task, garbled))[1],
        )

    for task in tasks:
        skipped, garbled = asyncio.run(wrong(task))
        assert skipped.reward == 0.0, task.id
        assert skipped.details["first_failure"]["tag"] == "empty_turn_model_response"
        if any(
            isinstance(v, str)
            for calls in task.reference
            for c in calls
            for v in c["args"].values()
        ):
            assert garbled.reward == 0.0, task.id


def test_bfcl_types_become_json_schema() -> None:
    doc = {
        "name": "f",
        "parameters": {
            "type": "dict",
            "required": ["a"],
            "properties": {
                "a": {"type": "float"},
                "b": {"type": "tuple", "items": {"type": "integer"}},
                "c": {"type": "dict", "properties": {"d": {"type": "any"}}},
            },
        },
    }
    schema = parameters_schema(doc)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert schema["properties"]["a"] == {"type": "number"}
    assert schema["properties"]["b"] == {"type": "array", "items": {"type": "integer"}}
    assert schema["properties"]["c"] == {"type": "object", "properties": {"d": {}}}
    with pytest.raises(Exception, match="unknown BFCL parameter type"):
        to_json_schema({"type": "complex"})


def test_call_strings_are_parsed_never_evaluated() -> None:
    def mv(source: str, destination: str) -> None: ...

    assert parse_call("mv('a', destination='b')", {"mv": mv}) == (
        "mv",
        {"source": "a", "destination": "b"},
    )
    for hostile in (
        "__import__('os').system('true')",
        "mv(source=open('x').read())",
        "rm(path='/')",
        "mv",
    ):
        with pytest.raises(ValueError):
            parse_call(hostile, {"mv": mv})


def test_held_out_functions_appear_at_their_turn(env) -> None:
    task = env.task("multi_turn_miss_func_0")
    ((turn, names),) = task.tools_added_at_turn.items()
    session = env.open(task)
    assert names[0] not in {t.name for t in session.tools(turn - 1)}
    assert names[0] in {t.name for t in session.tools(turn)}
    assert task.turns[turn] == data.ADDED_FUNCTIONS_PROMPT


def test_concurrent_rollouts_of_one_task_never_share_backend_state(env) -> None:
    task = env.task("multi_turn_base_0")
    sessions = [env.open(task) for _ in range(32)]

    async def act(index: int, session):
        tools = {tool.name: tool for tool in session.tools(0)}
        call = {"id": "c", "name": "mkdir", "args": {"dir_name": f"only_mine_{index}"}}
        return await execute_tool_call(call, tools, turn=0, step=0, timeout_s=10)

    async def all_at_once():
        return await asyncio.gather(*(act(i, s) for i, s in enumerate(sessions)))

    assert all(event.status == "ok" for _, event in asyncio.run(all_at_once()))
    for index, session in enumerate(sessions):
        contents = session.instances["GorillaFileSystem"]._current_dir.contents
        mine = {name for name in contents if name.startswith("only_mine_")}
        assert mine == {f"only_mine_{index}"}
    fresh = env.open(task).instances["GorillaFileSystem"]._current_dir.contents
    assert not any(name.startswith("only_mine_") for name in fresh)


def test_unknown_task_and_split_are_clear_errors(env) -> None:
    with pytest.raises(Exception, match="no multi-turn task 'nope'"):
        env.task("nope")
    with pytest.raises(Exception, match="no split 'dev'"):
        env.tasks("dev")
