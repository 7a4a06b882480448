"""A scripted, tool-calling fake chat model for graph-wiring tests (no model server).

Tests that use it say so in their names (`..._with_fake_model`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field


class ScriptedToolModel(BaseChatModel):
    """Replies with the scripted items in order; an Exception item is raised instead."""

    script: Iterator[AIMessage | str | Exception]
    bound: list[list[str]] = Field(default_factory=list)
    bound_schemas: list[list[dict[str, Any]]] = Field(default_factory=list)
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedToolModel:
        self.bound.append([t.name for t in tools])
        self.bound_schemas.append([convert_to_openai_tool(t) for t in tools])
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.seen.append(list(messages))
        reply = next(self.script)
        if isinstance(reply, Exception):
            raise reply
        message = AIMessage(content=reply) if isinstance(reply, str) else reply
        return ChatResult(generations=[ChatGeneration(message=message)])


def scripted(*replies: AIMessage | str | Exception) -> ScriptedToolModel:
    return ScriptedToolModel(script=iter(replies), bound=[], seen=[])


def call(name: str, args: dict[str, Any] | None = None) -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"id": f"id-{name}", "name": name, "args": args or {}}]
    )
