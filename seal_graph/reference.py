"""Play a task's reference solution through an environment, with no model involved.

An environment validates itself this way (its reference solutions must score 1.0), and
the same replay renders expert trajectories for warm-start training.
"""

from __future__ import annotations

import json
import uuid

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    convert_to_openai_messages,
)
from langchain_core.messages.tool import invalid_tool_call

from seal_graph.environment import Environment, Task
from seal_graph.records import Episode, ToolEvent, TurnRecord, Verdict
from seal_graph.sessions import run_turn_calls


def _call_message(tool_call: dict) -> AIMessage:
    """The agent's message for one replayed call; arguments that are not an object make
    an invalid call, as `ServedChatModel` records such a call from a model."""
    if isinstance(tool_call["args"], dict):
        return AIMessage(content="", tool_calls=[tool_call])
    bad = invalid_tool_call(
        name=tool_call["name"],
        args=json.dumps(tool_call["args"]),
        id=tool_call["id"],
        error="the arguments are not a JSON object",
    )
    return AIMessage(content="", invalid_tool_calls=[bad])


async def replay_calls(
    env: Environment, task: Task, calls_per_turn: list[list[dict]], run_id: str = "reference"
) -> tuple[Episode, Verdict]:
    """Execute the given calls turn by turn (one agent step per call) and verify."""
    session = env.open(task)
    messages: list[BaseMessage] = [SystemMessage(task.system_prompt)] if task.system_prompt else []
    events: list[ToolEvent] = []
    turns: list[TurnRecord] = []
    try:
        for turn, user_message in enumerate(task.turns):
            messages.append(HumanMessage(user_message))
            calls = [
                (step, {"id": f"call_{turn}_{step}", "name": call["name"], "args": call["args"]})
                for step, call in enumerate(
                    calls_per_turn[turn] if turn < len(calls_per_turn) else []
                )
            ]
            turn_events = []
            for (_, tool_call), (message, event) in zip(
                calls, await run_turn_calls(session, env, turn, calls), strict=True
            ):
                messages += [_call_message(tool_call), message]
                turn_events.append(event)
            messages.append(AIMessage(content=task.reply(turn)))
            session.end_turn(turn, turn_events)
            events += turn_events
            turns.append(
                TurnRecord(index=turn, user_message=user_message, steps=len(turn_events) + 1)
            )
        episode = Episode(
            episode_id=uuid.uuid4().hex,
            run_id=run_id,
            env=env.name,
            task_id=task.id,
            sample_index=0,
            messages=convert_to_openai_messages(messages),
            tool_events=events,
            turns=turns,
        )
        verdict = session.verify(episode)
    finally:
        session.close()
    return episode.with_verdict(verdict), verdict


async def replay_reference(env: Environment, task: Task) -> Verdict:
    """The verdict on the task's own reference solution (should be a success)."""
    if task.reference is None:
        raise ValueError(f"task {task.id} has no reference solution")
    return (await replay_calls(env, task, task.reference))[1]
