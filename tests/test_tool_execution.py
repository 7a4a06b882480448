"""The one tool-error policy: every bad call becomes an error ToolMessage and an event."""

from __future__ import annotations

import asyncio
import time

from langchain_core.tools import StructuredTool, ToolException

from seal_graph.tool_execution import execute_tool_call, invalid_call_event


def _slow() -> str:
    """Hangs."""
    time.sleep(5)
    return "late"


def _boom(x: int) -> int:
    """Raises."""
    raise RuntimeError("disk on fire")


def _add(a: int, b: int) -> int:
    """Adds."""
    return a + b


JSON_TOOL = StructuredTool(
    name="move",
    description="Move a file.",
    func=lambda **kw: f"moved {kw}",
    args_schema={
        "type": "object",
        "properties": {"src": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["src"],
        "additionalProperties": False,
    },
)
TOOLS = {
    t.name: t
    for t in (
        StructuredTool.from_function(_add, name="add"),
        StructuredTool.from_function(_boom, name="boom"),
        StructuredTool.from_function(_slow, name="slow"),
        JSON_TOOL,
    )
}


def run(name: str, args: object, timeout_s: float = 2.0):
    return asyncio.run(
        execute_tool_call(
            {"id": "c1", "name": name, "args": args}, TOOLS, turn=1, step=2, timeout_s=timeout_s
        )
    )


def test_ok_call_is_executed_and_recorded() -> None:
    message, event = run("add", {"a": 2, "b": 3})
    assert message.content == "5" and message.status == "success"
    assert (event.status, event.error_kind, event.turn, event.step) == ("ok", None, 1, 2)


def test_unknown_tool_lists_the_valid_names() -> None:
    message, event = run("rm_rf", {})
    assert message.status == "error" and event.error_kind == "unknown_tool"
    assert "Available tools: add, boom, move, slow" in message.content


def test_pydantic_schema_violation() -> None:
    message, event = run("add", {"a": "two", "b": 3})
    assert event.error_kind == "validation_error"
    assert "a: Input should be a valid integer" in message.content


def test_json_schema_violation_names_the_field() -> None:
    message, event = run("move", {"src": "a", "n": "many"})
    assert event.error_kind == "validation_error"
    assert "(n): 'many' is not of type 'integer'" in message.content
    _, extra = run("move", {"src": "a", "force": True})
    assert extra.error_kind == "validation_error"


def test_non_object_arguments() -> None:
    _, event = run("add", "[1, 2]")
    assert event.error_kind == "validation_error"


def test_non_finite_numbers_are_refused_not_executed() -> None:
    """Python's JSON reads NaN and Infinity; JSON has neither: never run a NaN order."""
    for value in (float("nan"), float("inf"), [1.0, float("-inf")]):
        message, event = run("move", {"src": "a", "n": value})
        assert event.error_kind == "validation_error", value
        assert "NaN and Infinity" in message.content
    _, nested = run("add", {"a": 1, "b": {"deep": [float("nan")]}})
    assert nested.error_kind == "validation_error"


def test_a_model_reply_with_non_object_arguments_is_an_invalid_call_not_a_crash() -> None:
    """langchain-core raises building a message from `[true]` arguments (the whole request,
    and a batch allowing no exceptions, would fail); the client makes it an invalid call,
    which the rollout records as a parse error, and keeps the good call beside it."""
    from seal_graph.client import ServedChatModel

    def call(index: int, name: str, arguments: str) -> dict:
        return {
            "id": f"c{index}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }

    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [call(1, "ls", "[true]"), call(2, "cd", '{"folder": "x"}')],
    }
    response = {
        "id": "r",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
    }
    model = ServedChatModel(base_url="http://127.0.0.1:9/v1", api_key="k", model="m")
    reply = model._create_chat_result(response).generations[0].message
    assert [c["name"] for c in reply.tool_calls] == ["cd"]
    [invalid] = reply.invalid_tool_calls
    assert (invalid["name"], invalid["args"], invalid["id"]) == ("ls", "[true]", "c1")
    _, event = invalid_call_event(invalid, turn=0, step=0)
    assert event.error_kind == "parse_error"


def test_tool_exception_becomes_data() -> None:
    message, event = run("boom", {"x": 1})
    assert event.error_kind == "tool_exception"
    assert "RuntimeError: disk on fire" in message.content


async def test_hanging_tool_times_out() -> None:
    began = time.perf_counter()
    message, event = await execute_tool_call(
        {"id": "c", "name": "slow", "args": {}}, TOOLS, turn=0, step=0, timeout_s=0.3
    )
    assert event.error_kind == "timeout" and time.perf_counter() - began < 2
    assert "did not finish within 0.3 s" in message.content


def test_a_tool_that_keeps_and_mutates_its_input_cannot_touch_the_record() -> None:
    kept: list[list[str]] = []
    keeper = StructuredTool.from_function(
        lambda tags: kept.append(tags) or "ok", name="keep", description="Keeps its input."
    )
    args = {"tags": ["a"]}
    _, event = asyncio.run(
        execute_tool_call(
            {"id": "c", "name": "keep", "args": args}, {"keep": keeper}, turn=0, step=0, timeout_s=2
        )
    )
    kept[0].append("mutated later")
    assert args == {"tags": ["a"]} and event.arguments == {"tags": ["a"]}


def test_unparseable_arguments() -> None:
    message, event = invalid_call_event(
        {"id": "x", "name": "add", "args": '{"a": 1,', "error": "Expecting value"}, turn=0, step=0
    )
    assert event.error_kind == "parse_error" and event.arguments == '{"a": 1,'
    assert message.status == "error" and "Expecting value" in message.content


def _read(path: str) -> str:
    """Reads a file the way the community file toolkit does: failures come back as text."""
    return f"Error: no such file or directory: {path}"


def _guarded(path: str) -> str:
    """Raises a ToolException that the tool itself turns into text."""
    raise ToolException(f"access denied to {path}")


CONVENTIONS = {
    "read": StructuredTool.from_function(_read, name="read"),
    "guarded": StructuredTool.from_function(_guarded, name="guarded", handle_tool_error=True),
}


def test_langchain_error_conventions_are_recorded_as_tool_errors() -> None:
    for name, needle in (("read", "no such file"), ("guarded", "access denied")):
        message, event = asyncio.run(
            execute_tool_call(
                {"id": "c1", "name": name, "args": {"path": "a.txt"}},
                CONVENTIONS,
                turn=0,
                step=0,
                timeout_s=2.0,
            )
        )
        assert message.status == "error" and needle in message.content
        assert (event.status, event.error_kind) == ("error", "tool_exception")
    message, event = asyncio.run(
        execute_tool_call(
            {"id": "c1", "name": "read", "args": {"path": "a.txt"}},
            CONVENTIONS,
            turn=0,
            step=0,
            timeout_s=2.0,
            is_error=lambda text: False,  # an environment whose tools mean it literally
        )
    )
    assert event.status == "ok"
