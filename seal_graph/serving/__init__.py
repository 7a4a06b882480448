"""Serving: start or attach to an OpenAI-compatible vLLM server."""

from seal_graph.serving.endpoint import ModelEndpoint, attach
from seal_graph.serving.server import ModelServer
from seal_graph.serving.settings import DEFAULT_SERVED_NAME, ServerSettings

__all__ = ["DEFAULT_SERVED_NAME", "ModelEndpoint", "ModelServer", "ServerSettings", "attach"]
