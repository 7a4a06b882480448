"""Roll out the agent a user already has: any LangGraph graph (or runnable) over messages.

seal-graph's own rollout graph (`graphs/rollout.py`) is one agent. A user's agent —
`langchain.agents.create_agent(model, tools)`, a planner `StateGraph` with a `ToolNode`,
anything that takes `{"messages": [...]}` and returns `{"messages": [...]}` — runs
unchanged; seal-graph gives it, for each user turn:

* **the chat model**: the served policy (`ServedChatModel` with the served token ids and
  logprobs and the policy version that answered each call);
* **the tools**: the environment's tools of that turn, as the training-time interface
  shows them (phi_schema's annotated descriptions; the base interface at evaluation).
  Each call runs through seal-graph's one execution path (validation, timeout, errors
  returned as text, with phi_err's recovery hint when the interface has one) and is
  recorded as a `ToolEvent`. A call to a tool that does not exist never reaches them:
  the agent's graph answers it its own way (a `ToolNode` says the tool is not valid),
  and it is recorded as an `unknown_tool` error; so are arguments that are not JSON;
* **the conversation**: the system prompt as the interface writes it (phi_cap's
  guidelines) and the history so far, plus the turn's user message.

An `AgentFactory` builds the agent from the model and tools: `create_agent` itself fits,
and so does `lambda model, tools: my_graph(model, tools)`. It is called once per user
turn, since a turn may offer new tools (BFCL's held-out functions).

A callback on the run records every LLM call (prompt and completion token ids as served,
logprobs, the version that answered); the turn's steps are the agent's LLM calls. After
the last turn the environment's verifier judges the episode and gives per-turn evidence,
so the episode is diagnosed, weighted and trained exactly as a built-in rollout's.
An agent that loops past `settings.step_limit` agent steps in a turn is stopped there
(the turn is marked as cut by the step limit).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import LLMResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from seal_graph.client import served_tokens
from seal_graph.diagnosis import looks_like_error
from seal_graph.environment import Environment, EnvSession, Task
from seal_graph.interface import BASE_INTERFACE, InterfaceVersion
from seal_graph.records import Episode, LLMCall, ToolEvent, TurnRecord
from seal_graph.sessions import run_turn_calls
from seal_graph.settings import RolloutSettings
from seal_graph.tool_execution import execute_tool_call, invalid_call_event

AgentFactory = Callable[[BaseChatModel, list[BaseTool]], Runnable]
"""Builds the user's agent for one user turn from the chat model and the turn's tools;
the agent takes and returns `{"messages": [...]}` (LangGraph's `MessagesState`)."""


class StepLimitReached(Exception):
    """The agent asked the model for more steps in one turn than the settings allow."""


class EpisodeRecorder(AsyncCallbackHandler):
    """Records the LLM calls and tool events of one episode, turn by turn."""

    run_inline = True  # in the agent's own task: the order of calls is the order recorded
    raise_error = True  # the step limit stops the agent

    def __init__(self, step_limit: int, endpoint: str = "") -> None:
        self.step_limit = step_limit
        self.endpoint = endpoint
        self.turn = 0
        self.step = 0  # LLM calls made in this turn so far
        self.llm_calls: list[LLMCall] = []
        self.tool_events: list[ToolEvent] = []
        self.last_reply: AIMessage | None = None
        self.tools: dict[str, BaseTool] = {}
        self._open: dict[UUID, tuple[float, int, list[str]]] = {}

    def start_turn(self, turn: int, tools: list[BaseTool]) -> None:
        self.turn, self.step, self.last_reply = turn, 0, None
        self.tools = {tool.name: tool for tool in tools}

    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        if self.step >= self.step_limit:
            raise StepLimitReached(f"{self.step_limit} agent steps in turn {self.turn}")
        tools = (kwargs.get("invocation_params") or {}).get("tools") or []
        names = [t.get("function", {}).get("name", "?") for t in tools if isinstance(t, dict)]
        self._open[run_id] = (time.perf_counter(), len(messages[0]) if messages else 0, names)
        self.step += 1

    async def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        began, prompt_count, names = self._open.pop(run_id, (time.perf_counter(), 0, []))
        message = getattr(response.generations[0][0], "message", None)
        if not isinstance(message, AIMessage):
            return
        tokens = served_tokens(message)
        step = self.step - 1
        self.llm_calls.append(
            LLMCall(
                turn=self.turn,
                step=step,
                prompt_message_count=prompt_count,
                tool_names=names,
                prompt_token_ids=tokens.prompt_token_ids if tokens else [],
                completion_token_ids=tokens.completion_token_ids if tokens else [],
                completion_logprobs=tokens.completion_logprobs if tokens else [],
                completion=message.content if isinstance(message.content, str) else "",
                tool_calls=[dict(c) for c in message.tool_calls],
                finish_reason=message.response_metadata.get("finish_reason"),
                seconds=time.perf_counter() - began,
                endpoint=self.endpoint,
                served_version=tokens.served_version if tokens else None,
            )
        )
        for raw in message.invalid_tool_calls:  # no agent graph runs these: record them
            self.tool_events.append(invalid_call_event(dict(raw), turn=self.turn, step=step)[1])
        for request in message.tool_calls:  # the agent's graph answers these its own way
            if request["name"] not in self.tools:
                _, event = await execute_tool_call(
                    dict(request), self.tools, turn=self.turn, step=step, timeout_s=1.0
                )
                self.tool_events.append(event)
        self.last_reply = message

    def events(self, turn: int) -> list[ToolEvent]:
        return [event for event in self.tool_events if event.turn == turn]


def recorded_tools(
    session: EnvSession,
    env: Environment,
    turn: int,
    interface: InterfaceVersion,
    recorder: EpisodeRecorder,
) -> list[BaseTool]:
    """The turn's tools as the interface shows them, each call executed on the session
    through `run_turn_calls` (validation, timeout, errors as text) and recorded."""

    def wrap(tool: BaseTool) -> BaseTool:
        async def call(**args: Any) -> str:
            step = max(recorder.step - 1, 0)
            request = {"id": f"call-{uuid.uuid4().hex[:12]}", "name": tool.name, "args": args}
            [(_, event)] = await run_turn_calls(session, env, turn, [(step, request)])
            if looks_like_error(event):  # phi_err: the interface's recovery hint
                event.output = interface.error_text(event.output)
            recorder.tool_events.append(event)
            return event.output

        schema = convert_to_openai_tool(tool)["function"]
        return StructuredTool(
            name=tool.name,
            description=schema.get("description", ""),
            args_schema=schema.get("parameters") or {"type": "object", "properties": {}},
            coroutine=call,
        )

    return [wrap(tool) for tool in interface.tools(session.tools(turn))]


async def run_agent_episode(
    factory: AgentFactory,
    env: Environment,
    task: Task,
    chat_model: BaseChatModel,
    *,
    settings: RolloutSettings,
    run_id: str,
    episode_id: str,
    sample_index: int = 0,
    interface: InterfaceVersion | None = None,
    mode: Literal["train", "eval"] = "train",
    policy_version: str = "base",
    endpoint: str = "",
) -> Episode:
    """One verified episode of `task` with the user's agent (see the module docstring)."""
    interface = interface or BASE_INTERFACE
    if mode == "eval" and not interface.is_base:
        raise ValueError("evaluation runs the base interface; adapted ones are for training")
    began = time.time()
    recorder = EpisodeRecorder(settings.step_limit, endpoint)
    prompt = interface.system_prompt(task.system_prompt)
    messages: list[BaseMessage] = [SystemMessage(prompt)] if prompt else []
    turns: list[TurnRecord] = []
    session = await asyncio.to_thread(env.open, task)
    try:
        for turn, user_message in enumerate(task.turns):
            tools = recorded_tools(session, env, turn, interface, recorder)
            recorder.start_turn(turn, tools)
            messages = [*messages, HumanMessage(user_message)]
            agent = factory(chat_model, tools)
            cut = False
            run = agent.ainvoke(
                {"messages": messages},
                {"callbacks": [recorder], "recursion_limit": 4 * settings.step_limit + 8},
            )
            try:
                # A fresh context: inside a running graph (the training loop's), LangGraph
                # would run the agent as that graph's subgraph, with its checkpointer.
                result = await asyncio.create_task(run, context=contextvars.Context())
                messages = list(result["messages"])
            except StepLimitReached:
                cut = True
                messages += [recorder.last_reply] if recorder.last_reply else []
            events = recorder.events(turn)
            session.end_turn(turn, events)
            turns.append(
                TurnRecord(
                    index=turn,
                    user_message=user_message,
                    steps=recorder.step,
                    tools_added=task.tools_added_at_turn.get(turn, []),
                    hit_step_limit=cut,
                )
            )
            more = turn + 1 < len(task.turns)
            if (
                settings.stop_at_failed_turn
                and more
                and await asyncio.to_thread(session.turn_passed, turn, events) is False
            ):
                break
        episode = Episode(
            episode_id=episode_id,
            run_id=run_id,
            env=env.name,
            task_id=task.id,
            sample_index=sample_index,
            policy_version=policy_version,
            interface_version=interface.version,
            messages=convert_to_openai_messages(messages),
            llm_calls=recorder.llm_calls,
            tool_events=recorder.tool_events,
            turns=turns,
            seconds=time.time() - began,
            model_seconds=sum(call.seconds for call in recorder.llm_calls),
        )
        verdict = await asyncio.to_thread(session.verify, episode)
    finally:
        session.close()
    return episode.with_verdict(verdict)
