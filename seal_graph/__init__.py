"""seal-graph: train tool-using LLM agents by co-evolving the agent and its environment.

`import seal_graph` stays light: it never imports torch, TRL or vLLM. Those sit behind
extras and are imported where they are used.
"""

from __future__ import annotations

from typing import Any

from seal_graph.client import ServedChatModel, ServedTokens, served_tokens
from seal_graph.errors import (
    ConfigError,
    InstallError,
    SealGraphError,
    ServerError,
    ServerStartError,
)
from seal_graph.serving import DEFAULT_SERVED_NAME, ModelEndpoint, ModelServer, ServerSettings
from seal_graph.serving import attach as attach

__version__ = "0.1.0"


def serve(settings: ServerSettings | None = None, **overrides: Any) -> ModelServer:
    """Start a vLLM server for a model (the bundled one by default) and wait until ready."""
    return ModelServer.start(settings, **overrides)


__all__ = [
    "DEFAULT_SERVED_NAME",
    "ConfigError",
    "InstallError",
    "ModelEndpoint",
    "ModelServer",
    "SealGraphError",
    "ServedChatModel",
    "ServedTokens",
    "ServerError",
    "ServerSettings",
    "ServerStartError",
    "__version__",
    "attach",
    "serve",
    "served_tokens",
]
