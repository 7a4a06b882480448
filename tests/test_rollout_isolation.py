"""Concurrent rollouts never share environment state: 16 episodes of one task, 8 at a
time, each counting in its own state with a slow tool (threads interleave)."""

from __future__ import annotations

import time
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool

from seal_graph.environment import Task
from seal_graph.records import Verdict
from seal_graph.runners.rollouts import run_rollouts
from seal_graph.settings import RolloutSettings
from seal_graph.store import TraceStore
from seal_graph.tools.langchain_env import from_langchain_tools


class CountTwiceModel(BaseChatModel):
    """Calls `bump` until it has seen two results in this turn, then answers."""

    @property
    def _llm_type(self) -> str:
        return "count-twice-fake"

    def bind_tools(self, tools: Any, **kwargs: Any) -> CountTwiceModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        since_user = 0
        for message in reversed(messages):
            if isinstance(message, HumanMessage):
                break
            since_user += isinstance(message, ToolMessage)
        if since_user < 2:
            reply = AIMessage(content="", tool_calls=[{"id": "b", "name": "bump", "args": {}}])
        else:
            reply = AIMessage(content="done")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _tools(state: dict) -> list:
    def bump() -> int:
        """Count one more."""
        value = state["count"]
        time.sleep(0.02)  # widen the window for a shared-state race
        state["count"] = value + 1
        return state["count"]

    return [StructuredTool.from_function(bump)]


async def test_concurrent_rollouts_keep_their_own_state_with_fake_model(tmp_path) -> None:
    env = from_langchain_tools(
        "isolation",
        tasks=[Task(id="t0", turns=["count"])],
        make_state=lambda task: {"count": 0},
        tools=_tools,
        verify=lambda task, state, episode: Verdict(
            reward=float(state["count"] == 2), success=state["count"] == 2
        ),
    )
    store = TraceStore(tmp_path / "traces.sqlite")
    report = await run_rollouts(
        env,
        CountTwiceModel(),
        ["t0"],
        store=store,
        run_id="iso",
        settings=RolloutSettings(group_size=16, concurrency=8),
        show_progress=False,
    )
    episodes = store.episodes("iso")
    assert len(episodes) == 16 and report.failures == []
    assert all([e.output for e in ep.tool_events] == ["1", "2"] for ep in episodes)
    assert all(ep.success for ep in episodes)
