"""Which policy answers: a card inside the vLLM server, and a header on every response.

vLLM loads this module into its API server (`--middleware`), so a client of a server
that is being trained can tell which weights answered it, without asking anyone else:

* every response carries `X-Seal-Policy-Version` (e.g. `base`, `step-6`): the version
  of the last swap the trainer verified;
* `GET /seal/policy` returns the card: version, the weights' path, the swap method and
  when it changed. The trainer `POST`s the card after each verified swap, and a
  supervisor that restarts a dead server reads it to load those weights again.

Both routes need the server's API key. The card lives in the server process: a restart
begins again at `base` until the weights are restored.
"""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, ValidationError

if TYPE_CHECKING:  # starlette is there inside vLLM's server, not in every client install
    from starlette.requests import Request
    from starlette.responses import Response

ROUTE = "/seal/policy"
HEADER = "X-Seal-Policy-Version"


class PolicyCard(BaseModel):
    """The weights a server answers with."""

    version: str = Field(default="base", min_length=1, max_length=200)
    weights: str | None = Field(default=None, description="Path the server loaded them from.")
    method: Literal["lora", "full"] | None = None
    updated: float = Field(default_factory=time.time)


_card = PolicyCard()


def _authorized(authorization: str | None) -> bool:
    keys = [k for k in os.environ.get("VLLM_API_KEY", "").split(",") if k]
    if not keys:
        return True  # a server without a key serves everyone, and so does its card
    sent = (authorization or "").removeprefix("Bearer ").strip()
    return any(hmac.compare_digest(sent, key) for key in keys)


async def policy_card(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """vLLM `--middleware`: serve and update the card; stamp every response."""
    from starlette.responses import JSONResponse

    global _card
    if request.url.path == ROUTE:
        if not _authorized(request.headers.get("authorization")):
            return JSONResponse({"error": "send the server's API key"}, status_code=401)
        if request.method == "POST":
            try:
                _card = PolicyCard.model_validate({**await request.json(), "updated": time.time()})
            except (ValidationError, ValueError) as exc:
                return JSONResponse({"error": f"not a policy card: {exc}"}, status_code=422)
        return JSONResponse(_card.model_dump())
    response = await call_next(request)
    response.headers[HEADER] = _card.version
    return response


MIDDLEWARE = f"{__name__}.policy_card"
"""The import path vLLM's `--middleware` takes."""
