"""Run the model's tool calls safely: validate, execute with a timeout, never crash.

One policy for every environment: a bad call by the model (unparseable arguments, an
unknown tool, arguments that break the schema, a tool that raises or hangs) comes back to
the model as an error `ToolMessage` and is recorded as a `ToolEvent` with its kind. Model
output is only ever used as keyword arguments of a named tool — never evaluated as code.

Tools that report failure without raising are recognised too, by LangChain's two
conventions: a tool whose `handle_tool_error` turns a `ToolException` into text (invoked
with a tool call, it answers a `ToolMessage` with `status="error"`), and a tool that
returns its error text ("Error: no such file", as the community toolkits do), which the
environment's `Environment.tool_output_is_error` recognises.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import time
from collections.abc import Callable
from typing import Any

import jsonschema
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from pydantic import ValidationError

from seal_graph.records import ToolErrorKind, ToolEvent

MAX_OUTPUT_CHARS = 8000


def _error(
    kind: ToolErrorKind, message: str, call: dict[str, Any], turn: int, step: int, began: float
) -> tuple[ToolMessage, ToolEvent]:
    text = f"Error: {message}"
    args = call.get("args", {})
    if not isinstance(args, dict | str):  # a JSON null, list or number: keep it as text
        args = json.dumps(args, default=str)
    return (
        ToolMessage(content=text, tool_call_id=call["id"], name=call["name"], status="error"),
        ToolEvent(
            turn=turn,
            step=step,
            call_id=call["id"],
            name=call["name"],
            arguments=args,
            status="error",
            error_kind=kind,
            output=text,
            seconds=time.perf_counter() - began,
        ),
    )


def _schema_violation(tool: BaseTool, args: dict[str, Any]) -> str | None:
    """Validate against a JSON-schema `args_schema` (pydantic schemas validate on invoke)."""
    schema = tool.args_schema
    if not isinstance(schema, dict):
        return None
    try:
        jsonschema.validate(args, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
        return f"invalid arguments for {tool.name} ({where}): {exc.message}"
    return None


def _non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_non_finite(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_non_finite(item) for item in value)
    return False


def argument_problem(tool_name: str, args: Any) -> str | None:
    """Why a call's arguments are not a JSON object a tool can take, or None. Python's
    JSON parser (and so LangChain's) reads `NaN` and `Infinity`, which JSON has not: a
    NaN-priced order must be refused as invalid, not executed."""
    if not isinstance(args, dict):
        return f"arguments for {tool_name} must be a JSON object"
    if _non_finite(args):
        return f"invalid arguments for {tool_name}: NaN and Infinity are not JSON numbers"
    return None


def _render(output: Any) -> str:
    text = output if isinstance(output, str) else json.dumps(output, default=str)
    if len(text) > MAX_OUTPUT_CHARS:
        text = text[:MAX_OUTPUT_CHARS] + f"... [truncated {len(text) - MAX_OUTPUT_CHARS} chars]"
    return text


def starts_with_error(output: str) -> bool:
    """LangChain's convention for a tool that returns its failure: text that starts with
    'Error:' (the community toolkits; LangChain's own error messages)."""
    return output.lstrip().startswith("Error:")


async def execute_tool_call(
    call: dict[str, Any],
    tools: dict[str, BaseTool],
    *,
    turn: int,
    step: int,
    timeout_s: float,
    is_error: Callable[[str], bool] = starts_with_error,
) -> tuple[ToolMessage, ToolEvent]:
    """Execute one LangChain tool call dict (`{'id', 'name', 'args'}`) and record it;
    `is_error` says whether a returned text reports a failure."""
    began = time.perf_counter()
    tool = tools.get(call["name"])
    if tool is None:
        valid = ", ".join(sorted(tools)) or "none"
        return _error(
            "unknown_tool",
            f"there is no tool named {call['name']!r}. Available tools: {valid}.",
            call,
            turn,
            step,
            began,
        )
    args = call.get("args")
    violation = argument_problem(tool.name, args) or _schema_violation(tool, args)
    if violation:
        return _error("validation_error", violation, call, turn, step, began)
    try:
        # A private copy: tools may keep and later mutate what they are given (BFCL's
        # backends do), which must not reach the recorded event or the caller's data.
        tool_call = {"type": "tool_call", "id": call["id"], "name": tool.name, "args": args}
        output = await asyncio.wait_for(tool.ainvoke(copy.deepcopy(tool_call)), timeout=timeout_s)
    except TimeoutError:
        return _error(
            "timeout", f"{tool.name} did not finish within {timeout_s:g} s", call, turn, step, began
        )
    except ValidationError as exc:
        detail = "; ".join(f"{'/'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return _error(
            "validation_error",
            f"invalid arguments for {tool.name}: {detail}",
            call,
            turn,
            step,
            began,
        )
    except Exception as exc:  # a tool's failure is data for the agent, not a crash
        return _error(
            "tool_exception",
            f"{tool.name} failed: {type(exc).__name__}: {exc}",
            call,
            turn,
            step,
            began,
        )
    handled = isinstance(output, ToolMessage) and output.status == "error"
    if isinstance(output, ToolMessage):
        output = output.content
    text = _render(output)
    if handled or is_error(text):
        return _error("tool_exception", text.removeprefix("Error: "), call, turn, step, began)
    return (
        ToolMessage(content=text, tool_call_id=call["id"], name=tool.name),
        ToolEvent(
            turn=turn,
            step=step,
            call_id=call["id"],
            name=tool.name,
            arguments=args,
            status="ok",
            output=text,
            seconds=time.perf_counter() - began,
        ),
    )


def invalid_call_event(
    raw: dict[str, Any], *, turn: int, step: int
) -> tuple[ToolMessage, ToolEvent]:
    """A tool call whose arguments the client could not parse (LangChain `invalid_tool_calls`)."""
    call = {
        "id": raw.get("id") or f"invalid-{turn}-{step}",
        "name": raw.get("name") or "?",
        "args": raw.get("args") or "",
    }
    reason = raw.get("error") or "invalid JSON"
    message = f"could not parse the arguments of {call['name']!r}: {reason}"
    return _error("parse_error", message, call, turn, step, time.perf_counter())
