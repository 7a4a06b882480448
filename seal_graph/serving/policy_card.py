"""Which policy answers: a card inside the vLLM server, and a header on every response.

vLLM loads this module into its API server (`--middleware`), so a client of a server
that is being trained can tell which weights answered it, without asking anyone else:

* every response carries `X-Seal-Policy-Version`: the weights that answered it. For the
  policy's name (the served model name, or the adapter name a LoRA swap serves it under)
  that is the version of the last swap the trainer verified (`base`,
  `step-6`, ...); a request for another name (a LoRA adapter loaded beside the policy,
  such as the failure agent) is answered by that adapter, and the header names it;
* `GET /seal/policy` returns the card: version, the weights' path, the swap method and
  when the weights changed. The trainer `POST`s the card after each verified swap, and a
  supervisor that restarts a dead server reads it to load those weights again (and posts
  it back with its original `updated`: a restart does not change the weights).

The card's route, like every other, needs the server's API key: `access.py` guards all
of them; it answers GET and POST only. The card lives in the server process: a restart
begins again at `base` until the weights are restored.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, ValidationError

from seal_graph.serving.access import is_cors_preflight, request_path
from seal_graph.serving.guards import RequestRefused, json_body

if TYPE_CHECKING:  # starlette is there inside vLLM's server, not in every client install
    from starlette.requests import Request
    from starlette.responses import Response

ROUTE = "/seal/policy"
HEADER = "X-Seal-Policy-Version"
SERVED_NAME_ENV = "SEAL_GRAPH_SERVED_MODEL_NAME"
"""The policy's served name, set by the launcher; requests for other names go to adapters."""


class PolicyCard(BaseModel):
    """The weights a server answers with."""

    version: str = Field(default="base", min_length=1, max_length=200)
    weights: str | None = Field(default=None, description="Path the server loaded them from.")
    method: Literal["lora", "full"] | None = None
    name: str | None = Field(
        default=None,
        description="The name the policy is asked for by, when it is not the server's own "
        "(a LoRA swap serves it as an adapter beside the base).",
    )
    updated: float = Field(
        default_factory=time.time, description="When the weights changed (epoch seconds)."
    )


_card = PolicyCard()


async def _requested_model(request: Request) -> str | None:
    """The `model` a JSON request asks for (the body `guards.json_body` parsed once)."""
    body = await json_body(request)
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) and model else None


def answered_by(requested: str | None, card: PolicyCard) -> str:
    """What the header says: the card's version for the policy's name (or no name), else
    the adapter that was asked for."""
    served = os.environ.get(SERVED_NAME_ENV)
    if requested is None or served is None or requested in (served, card.name):
        return card.version
    return requested


async def policy_card(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """vLLM `--middleware`: serve and update the card; stamp every response."""
    from starlette.responses import JSONResponse

    global _card
    if request_path(request) == ROUTE and not is_cors_preflight(request):
        if request.method not in ("GET", "POST"):
            return JSONResponse(
                {"error": f"{ROUTE} answers GET (read the card) and POST (the trainer)"},
                status_code=405,
                headers={"Allow": "GET, POST"},
            )
        if request.method == "POST":
            try:  # `updated` kept when sent: a restored card's weights did not change
                _card = PolicyCard.model_validate(await json_body(request))
            except ValidationError as exc:
                return JSONResponse({"error": f"not a policy card: {exc}"}, status_code=422)
            except RequestRefused as exc:
                return JSONResponse({"error": str(exc)}, status_code=exc.status)
        return JSONResponse(_card.model_dump())
    try:
        requested = await _requested_model(request)
    except RequestRefused as exc:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)
    response = await call_next(request)
    response.headers[HEADER] = answered_by(requested, _card)
    return response


MIDDLEWARE = f"{__name__}.policy_card"
"""The import path vLLM's `--middleware` takes."""
