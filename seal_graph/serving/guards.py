"""What a key holder may ask of a server seal-graph starts: bounded requests, weights
only from known folders, and request bodies read once and safely.

`access.py` decides *who* gets in; this module decides what a request that got in may
do, in three rules, each answered with a 4xx that says what to change:

* **JSON a server can read.** A body nested deeper than Python's recursion limit makes
  `json.loads` raise `RecursionError`, which vLLM's handlers turn into a 500 and an ASGI
  traceback. The body is parsed once here (the policy card reuses the parse) and such a
  body is refused with 400. Open paths (`access.ALLOWED`) are never parsed: a health
  check must stay cheap for anyone, whatever they send.
* **Weights only from allowed roots.** `/v1/load_lora_adapter` and `/collective_rpc`'s
  `reload_weights` load from a path the client names. A server loads only from the
  folders it was told about (`ServerSettings.weight_roots`: the run's folder by default),
  after resolving `..` and symlinks; anything else is refused with 403 naming the roots.
* **Bounded sampling.** `n` choices and `n x max_tokens` are capped
  (`ServerSettings.max_choices`, `max_sampled_tokens`): `n=1000` would otherwise hold the
  engine for minutes. Refused with 400 naming the cap.

vLLM loads this module into its API server (`--middleware`); the launcher passes the
limits in the environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seal_graph.serving.access import ALLOWED, request_path

if TYPE_CHECKING:  # starlette is there inside vLLM's server, not in every client install
    from starlette.requests import Request
    from starlette.responses import Response

WEIGHT_ROOTS_ENV = "SEAL_GRAPH_WEIGHT_ROOTS"
"""Folders (os.pathsep-separated) the server may load weights from."""
MAX_CHOICES_ENV = "SEAL_GRAPH_MAX_CHOICES"
MAX_SAMPLED_TOKENS_ENV = "SEAL_GRAPH_MAX_SAMPLED_TOKENS"
SAMPLING_ROUTES = ("/v1/chat/completions", "/v1/completions", "/invocations")
_STATE_KEY = "seal_graph_json"
_NOT_JSON = object()


class RequestRefused(Exception):
    """A request a key holder may not make, with the HTTP status that says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _reads_json(request: Request) -> bool:
    if request.method not in ("POST", "PUT", "PATCH") or request_path(request) in ALLOWED:
        return False
    kind = request.headers.get("content-type", "")
    return not kind or "json" in kind  # FastAPI reads a body without a type as JSON too


async def json_body(request: Request) -> Any:
    """The request's JSON body, parsed once per request (kept in the request's state, which
    every middleware's `Request` shares); None where there is none to read. Raises
    `RequestRefused` for JSON nested too deeply to parse."""
    state = request.scope.setdefault("state", {})
    if _STATE_KEY not in state:
        state[_STATE_KEY] = _NOT_JSON
        if _reads_json(request):
            raw = await request.body()
            try:
                state[_STATE_KEY] = json.loads(raw) if raw.strip() else _NOT_JSON
            except RecursionError as exc:
                raise RequestRefused(
                    400, "the JSON body is nested too deeply to read: flatten it"
                ) from exc
            except ValueError:  # not JSON: the route answers that itself
                pass
    body = state[_STATE_KEY]
    return None if body is _NOT_JSON else body


def weight_roots() -> list[Path]:
    """The folders this server may load weights from (resolved)."""
    raw = os.environ.get(WEIGHT_ROOTS_ENV, "")
    return [Path(root).resolve() for root in raw.split(os.pathsep) if root]


def check_weights_path(path: object) -> None:
    """Refuse a weights path outside the allowed roots (after `..` and symlinks)."""
    roots = weight_roots()
    named = ", ".join(str(root) for root in roots) or "none"
    if not isinstance(path, str) or not path or not os.path.isabs(path):
        raise RequestRefused(
            400, f"weights must be given as an absolute path under an allowed root ({named})"
        )
    resolved = Path(path).resolve()
    if not any(resolved.is_relative_to(root) for root in roots):
        raise RequestRefused(
            403,
            f"{path} is outside the folders this server loads weights from ({named}). "
            "Save the weights under one of them, or start the server with that folder "
            "as a weight root (`seal-graph serve --weight-root DIR`).",
        )


def _weights_path(path: str, body: dict[str, Any]) -> object | None:
    """The path a weight-loading request names; None for requests that load nothing."""
    if path == "/v1/load_lora_adapter":
        return body.get("lora_path")
    if path == "/collective_rpc" and body.get("method") == "reload_weights":
        kwargs = body.get("kwargs")
        return kwargs.get("weights_path") if isinstance(kwargs, dict) else ""
    return None


def _limit(env: str) -> int | None:
    raw = os.environ.get(env)
    return int(raw) if raw else None


def check_sampling(body: dict[str, Any]) -> None:
    """Refuse more choices, or more sampled tokens in all, than this server allows."""
    choices = body.get("n") if isinstance(body.get("n"), int) else 1
    tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    max_choices, max_tokens = _limit(MAX_CHOICES_ENV), _limit(MAX_SAMPLED_TOKENS_ENV)
    if max_choices is not None and choices > max_choices:
        raise RequestRefused(
            400, f"n={choices} is over this server's cap of {max_choices} choices per request"
        )
    if max_tokens is not None and isinstance(tokens, int) and choices * tokens > max_tokens:
        raise RequestRefused(
            400,
            f"n x max_tokens = {choices} x {tokens} is over this server's cap of "
            f"{max_tokens} sampled tokens per request: lower n or max_tokens",
        )


async def check_request(request: Request) -> None:
    """Every rule above, for one request that got past the key check."""
    body = await json_body(request)
    if not isinstance(body, dict):
        return
    path = request_path(request)
    weights = _weights_path(path, body)
    if weights is not None:
        check_weights_path(weights)
    if path in SAMPLING_ROUTES:
        check_sampling(body)


async def guard_requests(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """vLLM `--middleware`: refuse what `check_request` refuses, pass the rest on."""
    from starlette.responses import JSONResponse

    try:
        await check_request(request)
    except RequestRefused as exc:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)
    return await call_next(request)


MIDDLEWARE = f"{__name__}.guard_requests"
"""The import path vLLM's `--middleware` takes."""
