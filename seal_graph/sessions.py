"""The live environment sessions of a batch of rollouts, and the one way calls are run.

Graph state must be serialisable (it is checkpointed), but a session holds live objects
(backend instances, tools). A `SessionPool` — owned by whoever runs the episodes (the
rollout batch, or one rollout's context) — keeps them by episode id and closes every
one it still holds when the owner is done, so an episode that raises never leaks its
session. When a rollout resumes from a checkpoint in a fresh process, its session is
rebuilt by opening a new one and replaying the tool calls the checkpoint recorded —
environments are deterministic functions of their calls, so the rebuilt state equals the
lost one. `run_turn_calls` is the single path by which calls reach a session: the agent's
calls in the rollout graph, this replay, and reference solutions (`seal_graph.reference`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.messages import ToolMessage

from seal_graph.environment import Environment, EnvSession, Task
from seal_graph.records import ToolEvent
from seal_graph.tool_execution import execute_tool_call


async def run_turn_calls(
    session: EnvSession,
    env: Environment,
    turn: int,
    calls: list[tuple[int, dict[str, Any]]],
) -> list[tuple[ToolMessage, ToolEvent]]:
    """Execute `(step, call)` pairs of one user turn in order (tools may share state),
    on the session's executable tools of that turn."""
    tools = {tool.name: tool for tool in session.executable_tools(turn)}
    return [
        await execute_tool_call(
            call,
            tools,
            turn=turn,
            step=step,
            timeout_s=env.tool_timeout_s,
            is_error=env.tool_output_is_error,
        )
        for step, call in calls
    ]


class SessionPool:
    """Sessions of in-flight episodes, by episode id; `close()` ends all that remain."""

    def __init__(self) -> None:
        self._live: dict[str, EnvSession] = {}

    async def session_for(
        self,
        episode_id: str,
        env: Environment,
        task: Task,
        events: list[ToolEvent],
        turns_done: int,
    ) -> EnvSession:
        """The live session of an episode, rebuilt by replay if this pool has none."""
        session = self._live.get(episode_id)
        if session is not None:
            return session
        session = await asyncio.to_thread(env.open, task)
        self._live[episode_id] = session  # owned from here on: closed even if replay fails
        for turn in range(max(turns_done, max((e.turn for e in events), default=-1) + 1)):
            turn_events = [e for e in events if e.turn == turn]
            replayed = [
                (e.step, {"id": e.call_id, "name": e.name, "args": e.arguments})
                for e in turn_events
                if e.status == "ok" and isinstance(e.arguments, dict)
            ]
            await run_turn_calls(session, env, turn, replayed)
            if turn < turns_done:
                session.end_turn(turn, turn_events)
        return session

    def release(self, episode_id: str) -> None:
        """Close and forget an episode's session."""
        session = self._live.pop(episode_id, None)
        if session is not None:
            session.close()

    def close(self) -> None:
        """Close every session still held (episodes that raised or were cut short)."""
        for episode_id in list(self._live):
            self.release(episode_id)

    def __len__(self) -> int:
        return len(self._live)
