"""Live environment sessions of in-flight rollouts, keyed by episode id.

Graph state must be serialisable (it is checkpointed), but a session holds live objects
(backend instances, tools). Nodes therefore look their session up here. When a rollout
resumes from a checkpoint in a fresh process, the session is rebuilt by opening a new one
and replaying the tool calls the checkpoint recorded — environments are deterministic
functions of their calls, so the rebuilt state equals the lost one.
"""

from __future__ import annotations

import asyncio

from seal_graph.environment import Environment, EnvSession, Task
from seal_graph.records import ToolEvent
from seal_graph.tool_execution import execute_tool_call

_LIVE: dict[str, EnvSession] = {}


async def session_for(
    episode_id: str, env: Environment, task: Task, events: list[ToolEvent], turns_done: int
) -> EnvSession:
    """The live session of an episode, rebuilt by replay if this process has none."""
    session = _LIVE.get(episode_id)
    if session is not None:
        return session
    session = await asyncio.to_thread(env.open, task)
    for turn in range(max(turns_done, max((e.turn for e in events), default=-1) + 1)):
        turn_events = [e for e in events if e.turn == turn]
        tools = {tool.name: tool for tool in session.tools(turn)}
        for event in turn_events:
            if event.status == "ok" and isinstance(event.arguments, dict):
                call = {"id": event.call_id, "name": event.name, "args": event.arguments}
                await execute_tool_call(
                    call, tools, turn=turn, step=event.step, timeout_s=env.tool_timeout_s
                )
        if turn < turns_done:
            session.end_turn(turn, turn_events)
    _LIVE[episode_id] = session
    return session


def release(episode_id: str) -> None:
    """Close and forget an episode's session."""
    session = _LIVE.pop(episode_id, None)
    if session is not None:
        session.close()
