"""Every route of a server seal-graph starts needs its API key, but the health checks.

vLLM's own key check guards only the paths under `/v1`, `/v2`, `/inference` and
`/cohere`. Everything else it serves answers anyone who can reach the port: inference
(`/invocations`, `/tokenize`, `/detokenize`), control (`/pause`, `/resume`, `/sleep`,
`/collective_rpc`, `/abort_requests`, ...) and information (`/server_info` with the whole
config and model path, `/metrics`, `/docs`, `/openapi.json`). A local process, another
user's too, could stop or change the served agent. vLLM loads this module into its API
server (`--middleware`) and it turns the rule around: a route answers only with the key,
and `ALLOWED` lists the exceptions, each with its reason.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # starlette is there inside vLLM's server, not in every client install
    from starlette.requests import Request
    from starlette.responses import Response

ALLOWED: dict[str, str] = {
    "/health": "readiness: supervisors and load balancers poll it without credentials, "
    "and it says only whether the engine is up",
    "/ping": "readiness (SageMaker's name for /health), the same answer",
}
"""Paths that answer without the key, and why."""

KEY_ENV = "VLLM_API_KEY"
"""Where the server process finds its keys (comma-separated), as vLLM itself does."""


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8")).digest()


def authorized(authorization: str | None) -> bool:
    """Whether an `Authorization` header carries one of the server's keys (a server
    started without a key serves everyone). Compared as digests in constant time."""
    keys = [key for key in os.environ.get(KEY_ENV, "").split(",") if key]
    if not keys:
        return True
    scheme, _, sent = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not sent:
        return False
    return any(hmac.compare_digest(_digest(sent.strip()), _digest(key)) for key in keys)


def request_path(request: Request) -> str:
    """The path a request asks for, as the routes see it (without the root path)."""
    return request.url.path.removeprefix(request.scope.get("root_path", "")) or "/"


def is_cors_preflight(request: Request) -> bool:
    """A browser's CORS preflight: an OPTIONS that names the method it asks about. It
    carries no credentials by design, and vLLM's CORS middleware answers it before any
    route. Any other OPTIONS reaches the routes (vLLM's `/metrics` answers every method
    with its whole text), so it needs the key like every other method."""
    return (
        request.method == "OPTIONS"
        and "origin" in request.headers
        and "access-control-request-method" in request.headers
    )


async def require_api_key(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """vLLM `--middleware`: refuse every request without the key, but `ALLOWED` paths
    and CORS preflights."""
    from starlette.responses import JSONResponse

    if is_cors_preflight(request) or request_path(request) in ALLOWED:
        return await call_next(request)
    if not authorized(request.headers.get("authorization")):
        return JSONResponse(
            {"error": "this server needs its API key: send 'Authorization: Bearer KEY'"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    return await call_next(request)


MIDDLEWARE = f"{__name__}.require_api_key"
"""The import path vLLM's `--middleware` takes."""
