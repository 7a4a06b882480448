"""The agent a user already has, rolled out by seal-graph (`seal_graph.runners.own_agent`):
`examples/own_agents.py`'s `create_agent` graph and hand-built planner StateGraph give
the same episodes' verdicts as the built-in rollout graph on identical calls; their
tools run through seal-graph's execution path; the training interface reaches them."""

from __future__ import annotations

import asyncio

import pytest
from fake_models import call, scripted
from langchain_core.messages import AIMessage

from examples.own_agents import planner_agent, react_agent
from seal_graph.interface import Adaptation, InterfaceVersion
from seal_graph.registry import get_environment
from seal_graph.runners.rollouts import run_rollouts
from seal_graph.settings import RolloutSettings
from seal_graph.store import TraceStore

SETTINGS = RolloutSettings(group_size=1, concurrency=1, step_limit=6)


def replies_for(task, broken: bool = False) -> list[AIMessage | str]:
    """The model's replies that play the task's reference: its calls one step each, then
    its closing reply; `broken` changes the first stored value (the verdict fails)."""
    script: list[AIMessage | str] = []
    for turn, calls in enumerate(task.reference):
        for step in calls:
            args = dict(step["args"])
            if broken and step["name"] == "set_value" and not script:
                args["value"] = args["value"] + 1
            script.append(call(step["name"], args))
        script.append(task.reply(turn))
    return script


def roll(env, task, script, path, agent=None, interface=None):
    store = TraceStore(path / f"{agent.__name__ if agent else 'built-in'}.sqlite")
    report = asyncio.run(
        run_rollouts(
            env, scripted(*script), [task.id], store=store, run_id="r", settings=SETTINGS,
            agent=agent, interface=interface, show_progress=False,
        )
    )  # fmt: skip
    store.close()
    return report.episodes[0]


@pytest.mark.parametrize("agent", [react_agent, planner_agent])
def test_the_same_calls_give_the_same_verdicts_as_the_built_in_graph_with_fake_model(
    agent, tmp_path
) -> None:
    env = get_environment("kv-calc")
    by_category = {}
    for task in env.tasks("val"):
        by_category.setdefault(task.metadata["category"], task)
    for task in by_category.values():
        for broken in (False, True):
            script = replies_for(task, broken)
            path = tmp_path / f"{task.id}-{broken}"
            path.mkdir()
            built_in = roll(env, task, script, path)
            theirs = roll(env, task, script, path, agent=agent)
            assert theirs.success == built_in.success == (not broken), task.id
            assert [t.evidence.passed for t in theirs.turns] == [
                t.evidence.passed for t in built_in.turns
            ]
            assert [(e.name, e.arguments, e.status) for e in theirs.tool_events] == [
                (e.name, e.arguments, e.status) for e in built_in.tool_events
            ]
            assert [(c.turn, c.step) for c in theirs.llm_calls] == [
                (c.turn, c.step) for c in built_in.llm_calls
            ]


def test_calls_run_through_seal_graph_and_the_interface_reaches_the_agent_with_fake_model(
    tmp_path,
) -> None:
    """A bad call comes back as an error with the interface's recovery hint; a call to
    a tool that does not exist (answered by the agent's own ToolNode) is recorded too;
    the system prompt carries the interface's guideline and the tools its schema notes."""
    env = get_environment("kv-calc")
    task = env.tasks("train")[0]
    interface = InterfaceVersion(
        version=1,
        adaptations=[
            Adaptation(
                since_version=1, kind="schema", key="schema", text="Give every [required] argument."
            ),
            Adaptation(
                since_version=1,
                kind="guideline",
                key="missing",
                text="Ask when a number is missing.",
            ),
            Adaptation(
                since_version=1,
                kind="error_hint",
                key="missing_required_argument",
                text="Check the [required] parameters.",
            ),
        ],
    )
    model = scripted(
        call("set_value", {"key": "a"}), call("teleport"), "Done.", "Done.", "Done.", "Done."
    )
    store = TraceStore(tmp_path / "t.sqlite")
    report = asyncio.run(
        run_rollouts(
            env, model, [task.id], store=store, run_id="r", settings=SETTINGS,
            agent=react_agent, interface=interface, show_progress=False,
        )
    )  # fmt: skip
    (episode,) = report.episodes
    missing, unknown = episode.tool_events
    assert missing.error_kind == "validation_error"
    assert "Check the [required] parameters." in missing.output  # phi_err's hint, as shown
    assert unknown.error_kind == "unknown_tool" and unknown.name == "teleport"
    assert "Ask when a number is missing." in model.seen[0][0].content
    described = {
        s["function"]["name"]: s["function"]["description"] for s in model.bound_schemas[0]
    }
    assert "[required]" in described["set_value"]
    assert episode.interface_version == 1 and not episode.success
