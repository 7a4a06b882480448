"""The rollout graph: one episode of one task, under executable verification.

    begin → user_turn → agent ⇄ tools → end_turn → (next user_turn | verify) → END

The agent node calls the served model with the session's tools bound; the tools node
executes its calls (validated, with a timeout, errors returned to the agent); a turn ends
when the agent answers without a tool call or hits the per-turn step limit (evaluation
also ends the episode at a turn the environment reports failed). The state
records every LLM call with its served token ids and logprobs, every tool event and every
turn; `verify` asks the environment's verifier for the reward and per-turn evidence.
"""

from __future__ import annotations

import asyncio
import functools
import operator
import os
import time
import uuid
from typing import Annotated, Any, Literal, NotRequired

import openai
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    HumanMessage,
    SystemMessage,
    convert_to_openai_messages,
)
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from pydantic import BaseModel, ConfigDict, Field, with_config
from pydantic.json_schema import SkipJsonSchema
from typing_extensions import TypedDict

from seal_graph import registry
from seal_graph.client import served_tokens
from seal_graph.diagnosis import looks_like_error
from seal_graph.errors import ConfigError
from seal_graph.interface import BASE_INTERFACE, InterfaceVersion
from seal_graph.records import Episode, LLMCall, ToolEvent, TurnRecord
from seal_graph.sessions import SessionPool, run_turn_calls
from seal_graph.settings import RolloutSettings, api_key_field, api_key_from_environment
from seal_graph.store import TraceStore
from seal_graph.tool_execution import invalid_call_event


class RolloutContext(BaseModel):
    """Run-time settings of a rollout (LangGraph Studio renders every field's description)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    env: str = Field(
        default="kv-calc",
        description="Environment: kv-calc, bfcl, bfcl-strict, 'package.module:factory', or "
        "a name registered in Python.",
    )
    base_url: str = Field(
        default_factory=lambda: os.environ.get("OPENAI_BASE_URL", ""),
        description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 "
        "(default: $OPENAI_BASE_URL of the graph server).",
    )
    api_key_env: str = api_key_field(
        "the endpoint (`seal-graph serve` prints it; start `langgraph dev` with it set)"
    )
    model: str = Field(default="seal-agent", description="Served model name.")
    settings: RolloutSettings = Field(
        default_factory=RolloutSettings,
        description="Sampling: temperature, completion tokens per step, steps per turn.",
    )
    run_id: str = Field(default="adhoc", description="Run the episode belongs to (trace store).")
    store_path: str = Field(
        default="",
        description="Write the verified episode to this trace store (a SQLite file), so "
        "that `diagnose_evolve` can read it; empty = do not store (batches store their "
        "own).",
    )
    interface: InterfaceVersion | None = Field(
        default=None, description="Training interface version (None = the base interface)."
    )
    mode: Literal["train", "eval"] = Field(
        default="train", description="`eval` refuses any interface but the base one."
    )
    policy_version: str = Field(default="base", description="Which weights served the episode.")
    chat_model: SkipJsonSchema[Any] = Field(
        default=None,
        exclude=True,
        description="A LangChain chat model to use instead of building a client for "
        "`base_url` (Python only: a batch passes its endpoint's client this way, so no key "
        "is ever a context value).",
    )
    sessions: SkipJsonSchema[SessionPool] = Field(
        default_factory=SessionPool,
        exclude=True,
        description="Live environment sessions (Python only; a batch shares one pool).",
    )

    def require_model(self) -> None:
        """Fail with the field to set when no model can be reached."""
        if self.chat_model is not None:
            return
        if not self.base_url:
            raise ConfigError(
                "the rollout context has no `base_url`: set it to an OpenAI-compatible "
                "endpoint (e.g. http://127.0.0.1:8000/v1, which `seal-graph serve` prints), "
                "or start the graph server with OPENAI_BASE_URL set."
            )
        if not self.api_key():
            raise ConfigError(
                f"no API key for {self.base_url}: the graph server's environment variable "
                f"${self.api_key_env} (the context's `api_key_env`) is not set. Start the "
                f"graph server with {self.api_key_env}=KEY (the key `seal-graph serve` "
                "printed); keys never travel in a run's context."
            )

    def api_key(self) -> str:
        """The endpoint's key, read from the environment of the process running the graph."""
        return api_key_from_environment(self.api_key_env)


@functools.cache
def _default_context() -> RolloutContext:
    """The context of a bare `graph.invoke` without one: defaults from the environment,
    one session pool for all such runs (each episode's session is released by `verify`)."""
    return RolloutContext()


def _ctx(runtime: Runtime[RolloutContext]) -> RolloutContext:
    return runtime.context or _default_context()


@with_config(ConfigDict(use_attribute_docstrings=True))  # the docstrings are the schema's
class RolloutInput(TypedDict):
    """Which task to roll out."""

    task_id: str
    """Task id within the environment."""
    sample_index: NotRequired[int]
    """Index within the task's GRPO group."""
    episode_id: NotRequired[str]
    """Stable id (defaults to a fresh UUID)."""


@with_config(ConfigDict(use_attribute_docstrings=True))
class RolloutOutput(TypedDict):
    """What the agent did, then the verified episode. Every node writes some of these, so
    `stream_mode="updates"` (Studio's node view) shows each step of the work."""

    messages: Annotated[list[AnyMessage], add_messages]
    """The conversation as the agent sees it (user turns, replies, tool results)."""
    llm_calls: Annotated[list[dict[str, Any]], operator.add]
    """Every completion with served token ids (`LLMCall`)."""
    tool_events: Annotated[list[dict[str, Any]], operator.add]
    """Every tool call and its result or error (`ToolEvent`)."""
    turns: Annotated[list[dict[str, Any]], operator.add]
    """Finished user turns (`TurnRecord`: steps taken, whether the step limit cut it)."""
    turn: int
    """Current user turn (0-based)."""
    step: int
    """Agent steps taken in the current turn."""
    episode: NotRequired[dict[str, Any]]
    """The verified `Episode` as a dict: reward, success and the per-turn evidence."""


@with_config(ConfigDict(use_attribute_docstrings=True))
class RolloutState(RolloutInput, RolloutOutput):
    """The full episode state; everything here is checkpointed."""

    n_turns: int
    """Number of user turns in the task."""
    started: float
    """Wall-clock start (epoch seconds)."""
    decided: NotRequired[bool]
    """A turn failed and the settings stop there: the episode's success is decided."""


def is_context_overflow(exc: BaseException) -> bool:
    """The prompt exceeds the served model's context (vLLM answers HTTP 400)."""
    return isinstance(exc, ContextOverflowError) or (
        isinstance(exc, openai.BadRequestError) and "maximum context length" in str(exc)
    )


async def _environment(runtime: Runtime[RolloutContext], task_id: str):
    """The environment and task; first use reads data files, so off the event loop."""
    env = await asyncio.to_thread(registry.get_environment, _ctx(runtime).env)
    return env, await asyncio.to_thread(env.task, task_id)


async def _session(state: RolloutState, runtime: Runtime[RolloutContext]):
    env, task = await _environment(runtime, state["task_id"])
    events = [ToolEvent.model_validate(e) for e in state.get("tool_events", [])]
    session = await _ctx(runtime).sessions.session_for(
        state["episode_id"], env, task, events, len(state.get("turns", []))
    )
    return env, task, session


def _interface(ctx: RolloutContext) -> InterfaceVersion:
    """The interface in force; evaluation is held to the base interface."""
    interface = ctx.interface or BASE_INTERFACE
    if ctx.mode == "eval" and not interface.is_base:
        raise ConfigError(
            f"evaluation always runs the base interface, but interface version "
            f"{interface.version} was given; adapted interfaces are for training only."
        )
    return interface


async def begin(state: RolloutInput, runtime: Runtime[RolloutContext]) -> dict[str, Any]:
    _ctx(runtime).require_model()  # before anything runs: name the missing setting
    _, task = await _environment(runtime, state["task_id"])
    prompt = _interface(_ctx(runtime)).system_prompt(task.system_prompt)
    system = [SystemMessage(prompt)] if prompt else []
    return {
        "episode_id": state.get("episode_id") or uuid.uuid4().hex,
        "sample_index": state.get("sample_index", 0),
        "messages": system,
        "n_turns": len(task.turns),
        "turn": 0,
        "step": 0,
        "started": time.time(),
    }


async def user_turn(state: RolloutState, runtime: Runtime[RolloutContext]) -> dict[str, Any]:
    _, task, _ = await _session(state, runtime)
    return {"messages": [HumanMessage(task.turns[state["turn"]])], "step": 0}


async def agent(state: RolloutState, runtime: Runtime[RolloutContext]) -> dict[str, Any]:
    ctx = _ctx(runtime)
    _, _, session = await _session(state, runtime)
    tools = _interface(ctx).tools(session.tools(state["turn"]))
    llm = ctx.chat_model or registry.chat_model(
        ctx.base_url, ctx.api_key(), ctx.model, ctx.settings.temperature, ctx.settings.max_tokens
    )
    began = time.perf_counter()
    try:
        reply = await (llm.bind_tools(tools) if tools else llm).ainvoke(state["messages"])
    except Exception as exc:
        if not is_context_overflow(exc):
            raise
        # The conversation no longer fits the model: the agent cannot act this turn.
        reply = AIMessage(content="", response_metadata={"finish_reason": "context_overflow"})
    tokens = served_tokens(reply)
    call = LLMCall(
        turn=state["turn"],
        step=state["step"],
        prompt_message_count=len(state["messages"]),
        tool_names=[tool.name for tool in tools],
        prompt_token_ids=tokens.prompt_token_ids if tokens else [],
        completion_token_ids=tokens.completion_token_ids if tokens else [],
        completion_logprobs=tokens.completion_logprobs if tokens else [],
        completion=reply.content if isinstance(reply.content, str) else str(reply.content),
        tool_calls=[dict(c) for c in reply.tool_calls],
        finish_reason=reply.response_metadata.get("finish_reason"),
        seconds=time.perf_counter() - began,
        endpoint=ctx.base_url,
        served_version=tokens.served_version if tokens else None,
    )
    update: dict[str, Any] = {
        "messages": [reply],
        "llm_calls": [call.model_dump()],
        "step": state["step"] + 1,
    }
    if not reply.tool_calls and not reply.invalid_tool_calls and _attempted_call(call.completion):
        # The server's parser could not read the model's tool-call block: a parse error
        # the agent cannot be answered on (there is no call id), recorded for diagnosis.
        _, event = invalid_call_event(
            {"name": "?", "args": call.completion, "error": "malformed <tool_call> block"},
            turn=state["turn"],
            step=state["step"],
        )
        update["tool_events"] = [event.model_dump()]
    return update


def _attempted_call(text: str) -> bool:
    """A tool-call block the parser rejected (unparseable, or a tag missing)."""
    return "<tool_call>" in text or "</tool_call>" in text


async def tools(state: RolloutState, runtime: Runtime[RolloutContext]) -> dict[str, Any]:
    env, _, session = await _session(state, runtime)
    reply = state["messages"][-1]
    assert isinstance(reply, AIMessage)
    step = state["step"] - 1
    interface = _interface(_ctx(runtime))
    calls = [(step, dict(call)) for call in reply.tool_calls]
    results = await run_turn_calls(session, env, state["turn"], calls)
    results += [
        invalid_call_event(dict(raw), turn=state["turn"], step=step)
        for raw in reply.invalid_tool_calls
    ]
    messages, events = [], []
    for message, event in results:
        if looks_like_error(event):  # phi_err: a recovery hint for the error's pattern
            shown = interface.error_text(event.output)
            message.content, event.output = shown, shown
        messages.append(message)
        events.append(event.model_dump())
    return {"messages": messages, "tool_events": events}


async def end_turn(state: RolloutState, runtime: Runtime[RolloutContext]) -> dict[str, Any]:
    _, task, session = await _session(state, runtime)
    turn = state["turn"]
    events = [ToolEvent.model_validate(e) for e in state["tool_events"] if e["turn"] == turn]
    session.end_turn(turn, events)
    last = state["messages"][-1]
    record = TurnRecord(
        index=turn,
        user_message=task.turns[turn],
        steps=state["step"],
        tools_added=task.tools_added_at_turn.get(turn, []),
        hit_step_limit=not isinstance(last, AIMessage),  # cut after tools, not answered
    )
    update: dict[str, Any] = {"turns": [record.model_dump()], "turn": turn + 1}
    if _ctx(runtime).settings.stop_at_failed_turn and turn + 1 < len(task.turns):
        update["decided"] = await asyncio.to_thread(session.turn_passed, turn, events) is False
    return update


async def verify(state: RolloutState, runtime: Runtime[RolloutContext]) -> dict[str, Any]:
    ctx = _ctx(runtime)
    env, _, session = await _session(state, runtime)
    calls = [LLMCall.model_validate(c) for c in state["llm_calls"]]
    episode = Episode(
        episode_id=state["episode_id"],
        run_id=ctx.run_id,
        env=env.name,
        task_id=state["task_id"],
        sample_index=state.get("sample_index", 0),
        policy_version=ctx.policy_version,
        interface_version=_interface(ctx).version,
        messages=convert_to_openai_messages(state["messages"]),
        llm_calls=calls,
        tool_events=[ToolEvent.model_validate(e) for e in state["tool_events"]],
        turns=[TurnRecord.model_validate(t) for t in state["turns"]],
        seconds=time.time() - state["started"],
        model_seconds=sum(c.seconds for c in calls),
    )
    try:
        verdict = await asyncio.to_thread(session.verify, episode)
    finally:
        ctx.sessions.release(state["episode_id"])
    episode = episode.with_verdict(verdict)
    if ctx.store_path:  # a single run (e.g. from Studio) feeds `diagnose_evolve` this way
        await asyncio.to_thread(_store_episode, ctx.store_path, episode)
    return {"episode": episode.model_dump()}


def _store_episode(path: str, episode: Episode) -> None:
    store = TraceStore(path)
    try:
        store.ensure_run(episode.run_id, episode.env)
        store.write_episode(episode)
    finally:
        store.close()


def after_agent(state: RolloutState) -> Literal["tools", "end_turn"]:
    last = state["messages"][-1]
    acted = isinstance(last, AIMessage) and (last.tool_calls or last.invalid_tool_calls)
    return "tools" if acted else "end_turn"


def after_tools(
    state: RolloutState, runtime: Runtime[RolloutContext]
) -> Literal["agent", "end_turn"]:
    return "end_turn" if state["step"] >= _ctx(runtime).settings.step_limit else "agent"


def after_turn(state: RolloutState) -> Literal["user_turn", "verify"]:
    done = state["turn"] >= state["n_turns"] or state.get("decided", False)
    return "verify" if done else "user_turn"


builder = StateGraph(
    RolloutState,
    input_schema=RolloutInput,
    output_schema=RolloutOutput,
    context_schema=RolloutContext,
)
for node in (begin, user_turn, agent, tools, end_turn, verify):
    builder.add_node(node.__name__, node)
builder.add_edge(START, "begin")
builder.add_edge("begin", "user_turn")
builder.add_edge("user_turn", "agent")
builder.add_conditional_edges("agent", after_agent)
builder.add_conditional_edges("tools", after_tools)
builder.add_conditional_edges("end_turn", after_turn)
builder.add_edge("verify", END)

graph = builder.compile(name="rollout")
