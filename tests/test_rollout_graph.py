"""Wiring of the rollout graph, driven by a scripted fake model (no server)."""

from __future__ import annotations

import time

import pytest
from fake_models import call, scripted
from langchain_core.messages import AIMessage
from langchain_core.tools import StructuredTool

from seal_graph.diagnosis import diagnose_episode
from seal_graph.environment import Task
from seal_graph.errors import ConfigError
from seal_graph.graphs.rollout import RolloutContext, graph
from seal_graph.records import Episode, Verdict
from seal_graph.registry import register_environment
from seal_graph.runners.rollouts import run_rollouts
from seal_graph.settings import RolloutSettings
from seal_graph.store import TraceStore
from seal_graph.tools.kv_calc import make_env
from seal_graph.tools.langchain_env import from_langchain_tools


def _add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _boom() -> str:
    """Always fails."""
    raise RuntimeError("backend exploded")


def _hang() -> str:
    """Never answers in time."""
    time.sleep(3)
    return "too late"


def toy_env():
    tasks = [Task(id="t0", turns=["do things", "and more"])]
    return from_langchain_tools(
        "toy",
        tasks=tasks,
        tools=[
            StructuredTool.from_function(f, name=n)
            for f, n in ((_add, "add"), (_boom, "boom"), (_hang, "hang"))
        ],
        verify=lambda task, state, episode: Verdict(reward=0.0, success=False),
        tool_timeout_s=0.3,
    )


async def rollout(env, model, task_id="t0", step_limit=20, settings=None) -> Episode:
    result = await graph.ainvoke(
        {"task_id": task_id},
        context=RolloutContext(
            env=register_environment(env),
            chat_model=model,
            settings=settings or RolloutSettings(step_limit=step_limit),
        ),
    )
    return Episode.model_validate(result["episode"])


async def test_every_bad_call_is_recorded_and_the_rollout_goes_on_with_fake_model() -> None:
    bad_json = AIMessage(
        content="",
        invalid_tool_calls=[
            {
                "id": "x1",
                "name": "add",
                "args": '{"a": 1',
                "error": "bad JSON",
                "type": "invalid_tool_call",
            }
        ],
    )
    model = scripted(
        call("rm_rf"),
        call("add", {"a": "one", "b": 2}),
        bad_json,
        call("boom"),
        call("hang"),
        call("add", {"a": 1, "b": 2}),
        "all done",
        "<tool_call>\n{not json}\n</tool_call>",  # turn 2: a block the server could not parse
    )
    episode = await rollout(toy_env(), model)
    kinds = [(e.turn, e.name, e.error_kind) for e in episode.tool_events]
    assert kinds == [
        (0, "rm_rf", "unknown_tool"),
        (0, "add", "validation_error"),
        (0, "add", "parse_error"),
        (0, "boom", "tool_exception"),
        (0, "hang", "timeout"),
        (0, "add", None),
        (1, "?", "parse_error"),
    ]
    assert [t.steps for t in episode.turns] == [7, 1]
    errors = [
        m for m in episode.messages if m["role"] == "tool" and m["content"].startswith("Error")
    ]
    assert len(errors) == 5
    assert len(episode.llm_calls) == 8
    assert episode.llm_calls[6].completion == "all done"


async def test_step_limit_cuts_a_looping_turn_with_fake_model() -> None:
    model = scripted(*[call("add", {"a": 1, "b": 1}) for _ in range(3)], "fine")
    episode = await rollout(toy_env(), model, step_limit=3)
    assert [t.hit_step_limit for t in episode.turns] == [True, False]
    assert [t.steps for t in episode.turns] == [3, 1]
    cut = diagnose_episode(episode)[0]  # the cut turn is labelled, the cut is evidence
    assert cut.label and cut.evidence["hit_step_limit"] is True


async def test_reference_calls_solve_kv_calc_with_fake_model() -> None:
    env = make_env()
    task = env.tasks("test")[0]
    replies = [
        c for turn in task.reference for c in [*(call(x["name"], x["args"]) for x in turn), "done"]
    ]
    model = scripted(*replies)
    episode = await rollout(env, model, task_id=task.id)
    assert episode.success and episode.reward == 1.0
    assert all(t.evidence.passed for t in episode.turns)
    assert model.bound[0] == ["set_value", "get_value", "list_keys", "add", "multiply"]


@pytest.mark.parametrize("evaluation", [True, False])
async def test_evaluation_stops_at_the_first_failed_turn_training_runs_all_with_fake_model(
    evaluation: bool,
) -> None:
    env = make_env()
    task = next(t for t in env.tasks("test") if len(t.turns) >= 3 and all(t.reference))
    model = scripted(*["I would rather not." for _ in task.turns])  # fails every turn
    settings = RolloutSettings().greedy() if evaluation else RolloutSettings()
    episode = await rollout(env, model, task_id=task.id, settings=settings)
    assert len(episode.turns) == (1 if evaluation else len(task.turns))
    assert not episode.success  # unreached turns fail: the verdict is the same either way
    assert len(model.seen) == len(episode.turns)


async def test_interrupted_batch_resumes_from_the_checkpoint_with_fake_model(tmp_path) -> None:
    env = toy_env()
    store = TraceStore(tmp_path / "traces.sqlite")
    crashing = scripted(call("add", {"a": 1, "b": 2}), ConnectionError("server gone"))
    with pytest.raises(ConnectionError):
        await run_rollouts(env, crashing, ["t0"], store=store, run_id="r", show_progress=False)
    assert store.count("r") == 0  # nothing half-written
    # The resumed run gets only the replies after the crash point: a restart from
    # scratch would consume them differently and fail the assertions below.
    resumed = scripted("turn one done", "turn two done")
    report = await run_rollouts(env, resumed, ["t0"], store=store, run_id="r", show_progress=False)
    (episode,) = report.episodes
    assert [c.completion for c in episode.llm_calls] == ["", "turn one done", "turn two done"]
    assert [e.output for e in episode.tool_events] == ["3"]
    again = await run_rollouts(
        env, scripted(), ["t0"], store=store, run_id="r", show_progress=False
    )
    assert (again.skipped, store.count("r")) == (1, 1)


async def test_a_batch_closes_the_session_of_an_episode_that_raised_with_fake_model(
    tmp_path,
) -> None:
    env = toy_env()
    closed: list[str] = []
    open_session = env.open

    def tracked_open(task):
        session = open_session(task)
        close = session.close
        session.close = lambda: (closed.append(task.id), close())
        return session

    env.open = tracked_open
    store = TraceStore(tmp_path / "traces.sqlite")
    crashing = scripted(call("add", {"a": 1, "b": 2}), RuntimeError("model bug"))
    with pytest.raises(RuntimeError):
        await run_rollouts(env, crashing, ["t0"], store=store, run_id="r", show_progress=False)
    assert closed == ["t0"]  # verify never ran; the batch's pool closed it


async def test_a_store_path_in_the_context_stores_the_episode_with_fake_model(tmp_path) -> None:
    path = tmp_path / "studio.sqlite"
    context = RolloutContext(
        env=register_environment(toy_env()),
        chat_model=scripted("one", "two"),
        store_path=str(path),
        run_id="studio",
    )
    await graph.ainvoke({"task_id": "t0"}, context=context)
    store = TraceStore(path)
    assert store.count("studio") == 1 and store.runs() == ["studio"]


async def test_a_context_without_an_endpoint_names_the_missing_field(monkeypatch) -> None:
    context = RolloutContext(env=register_environment(toy_env()), base_url="")
    with pytest.raises(ConfigError, match="no `base_url`"):
        await graph.ainvoke({"task_id": "t0"}, context=context)
    monkeypatch.delenv("MY_SERVER_KEY", raising=False)
    context = context.model_copy(
        update={"base_url": "http://127.0.0.1:9/v1", "api_key_env": "MY_SERVER_KEY"}
    )
    with pytest.raises(ConfigError, match=r"\$MY_SERVER_KEY .* is not set"):
        await graph.ainvoke({"task_id": "t0"}, context=context)


def test_the_context_names_the_key_and_never_holds_it(monkeypatch) -> None:
    monkeypatch.setenv("MY_SERVER_KEY", "s3cret")
    context = RolloutContext(api_key_env="MY_SERVER_KEY")
    assert context.api_key() == "s3cret"
    assert "s3cret" not in context.model_dump_json() and "s3cret" not in repr(context)
    assert "api_key" not in RolloutContext.model_json_schema()["properties"]
    monkeypatch.delenv("SEAL_GRAPH_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "openai-side")
    assert RolloutContext().api_key() == "openai-side"  # what `seal-graph serve` exports
    with pytest.raises(ValueError, match="api_key_env"):
        RolloutContext(api_key_env="not a variable name")


async def test_a_step_by_step_stream_shows_what_the_agent_did_with_fake_model() -> None:
    context = RolloutContext(
        env=register_environment(toy_env()),
        chat_model=scripted(call("add", {"a": 1, "b": 2}), "3", "done"),
    )
    updates = [
        update
        async for update in graph.astream(
            {"task_id": "t0"},
            context=context,
            stream_mode="updates",
            output_keys=graph.output_channels,  # what the LangGraph API streams
        )
    ]
    shown = {node: set(values or {}) for update in updates for node, values in update.items()}
    assert {"messages", "llm_calls"} <= shown["agent"]
    assert {"messages", "tool_events"} <= shown["tools"]
    assert {"messages"} <= shown["user_turn"] and {"turns"} <= shown["end_turn"]
    assert {"episode"} <= shown["verify"]
