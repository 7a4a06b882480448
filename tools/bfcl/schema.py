"""BFCL tool docs to real JSON Schema, and BFCL call strings to (name, kwargs) without eval.

BFCL's docs use Python-ish types (`dict`, `float`, `tuple`, `any`); JSON Schema
validators and vLLM's schema-constrained decoding need `object`, `number`, `array`.
Ground-truth answers are call strings like `mv(source='a', destination='b')`; they are
parsed with `ast` and literal evaluation, so no string is ever executed as code.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from typing import Any

from seal_graph.errors import ConfigError

_TYPE_MAP = {
    "dict": "object",
    "object": "object",
    "float": "number",
    "number": "number",
    "integer": "integer",
    "int": "integer",
    "string": "string",
    "str": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
}


def to_json_schema(node: Any) -> Any:
    """Recursively convert a BFCL parameter doc into JSON Schema."""
    if isinstance(node, list):
        return [to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {
        key: to_json_schema(value)
        for key, value in node.items()
        if key not in ("type", "properties")
    }
    if "properties" in node:
        converted["properties"] = {
            name: to_json_schema(spec) for name, spec in node["properties"].items()
        }
    kind = node.get("type")
    if kind == "any":
        pass  # no constraint
    elif isinstance(kind, str):
        if kind not in _TYPE_MAP:
            raise ConfigError(f"unknown BFCL parameter type {kind!r}")
        converted["type"] = _TYPE_MAP[kind]
    return converted


def parameters_schema(doc: dict[str, Any]) -> dict[str, Any]:
    """The `parameters` of a BFCL doc as an object schema (no extra arguments allowed)."""
    schema = to_json_schema(doc.get("parameters") or {"type": "dict", "properties": {}})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    schema["additionalProperties"] = False
    return schema


def parse_call(call: str, methods: dict[str, Callable[..., Any]]) -> tuple[str, dict[str, Any]]:
    """`name(a=1, 'x')` -> (name, kwargs); positional arguments are named by signature."""
    try:
        node = ast.parse(call.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"not a call: {call!r}") from exc
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {call!r}")
    name = node.func.id
    if name not in methods:
        raise ValueError(f"unknown function {name!r} in {call!r}")
    kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
    if node.args:
        params = list(inspect.signature(methods[name]).parameters)
        for param, value in zip(params, node.args, strict=False):
            kwargs[param] = ast.literal_eval(value)
    return name, kwargs


def format_call(name: str, args: dict[str, Any]) -> str:
    """A model call as BFCL's decoded call string (`name(a=1,b='x')`), for export."""
    return f"{name}({','.join(f'{key}={value!r}' for key, value in args.items())})"
