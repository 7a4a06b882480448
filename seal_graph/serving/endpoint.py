"""An OpenAI-compatible endpoint: where it is, how to authenticate, which model to ask.

Both a server seal-graph started and one someone else runs (`attach`) end up as a
`ModelEndpoint`; everything downstream (rollouts, evaluation, training's swap) talks to
that, not to a process.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from pydantic import BaseModel, Field

from seal_graph.client import ServedChatModel
from seal_graph.errors import ConfigError, ServerError
from seal_graph.settings import API_KEY_ENV


def normalize_base_url(base_url: str) -> str:
    """Accept `http://host:port` or `.../v1`; return the `/v1` form OpenAI clients want."""
    url = base_url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"base URL {base_url!r} must start with http:// or https://")
    return url if url.endswith("/v1") else f"{url}/v1"


class ModelEndpoint(BaseModel):
    """A reachable OpenAI-compatible server and the model name to ask it for."""

    base_url: str = Field(description="Base URL ending in /v1.")
    api_key: str = Field(repr=False, description="Sent as the Bearer token; never logged.")
    model: str = Field(description="Served model name.")

    @property
    def server_root(self) -> str:
        """The server's root URL (vLLM's admin routes live outside /v1)."""
        return self.base_url.removesuffix("/v1")

    def chat_model(self, **kwargs: Any) -> ServedChatModel:
        """A LangChain chat model bound to this endpoint; kwargs go to `ServedChatModel`."""
        kwargs.setdefault("timeout", 120.0)
        return ServedChatModel(
            model=self.model, base_url=self.base_url, api_key=self.api_key, **kwargs
        )

    def list_models(self, timeout_s: float = 10.0) -> list[str]:
        """Names the server serves; raises `ServerError` naming what failed."""
        try:
            response = httpx.get(
                f"{self.base_url}/models",
                headers={"Authorization": f"Bearer {self.api_key}"},
                timeout=timeout_s,
            )
        except httpx.HTTPError as exc:
            raise ServerError(
                f"cannot reach the model server at {self.base_url} ({type(exc).__name__}: "
                f"{exc}). Is it running? Check the URL, or start one with `seal-graph serve`."
            ) from exc
        if response.status_code == 401:
            raise ServerError(
                f"the model server at {self.base_url} rejected the API key (HTTP 401). "
                f"Pass the key it was started with (--api-key or ${API_KEY_ENV})."
            )
        if response.status_code != 200:
            raise ServerError(
                f"the model server at {self.base_url} answered /models with HTTP "
                f"{response.status_code}: {response.text[:300]}"
            )
        return [entry["id"] for entry in response.json().get("data", [])]


def attach(base_url: str, api_key: str | None = None, model: str | None = None) -> ModelEndpoint:
    """Attach to a server someone already runs; checks reachability, key and model name."""
    key = api_key or os.environ.get(API_KEY_ENV)
    if not key:
        raise ConfigError(
            f"no API key for {base_url}: pass --api-key (api_key=...) or set ${API_KEY_ENV}. "
            "seal-graph never talks to a model server without one."
        )
    endpoint = ModelEndpoint(base_url=normalize_base_url(base_url), api_key=key, model=model or "")
    served = endpoint.list_models()
    if not served:
        raise ServerError(f"the model server at {endpoint.base_url} serves no model.")
    if model and model not in served:
        raise ConfigError(
            f"model {model!r} is not served at {endpoint.base_url}; it serves: {', '.join(served)}"
        )
    return endpoint.model_copy(update={"model": model or served[0]})
