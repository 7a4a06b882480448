"""Shared fixtures. Tests that exercise the model talk to a real vLLM server on loopback
serving the bundled SmolLM2-135M; it is started once per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from seal_graph import ModelServer, ServerSettings
from seal_graph.bundled_model import ensure_bundled_model


@pytest.fixture(scope="session")
def server() -> Iterator[ModelServer]:
    """The real vLLM server with the bundled model (float32, LoRA enabled, tool parsing on)."""
    with ModelServer.start(ServerSettings(port=0)) as running:
        yield running


@pytest.fixture(scope="session")
def tokenizer():
    """The bundled checkpoint's own tokenizer (with the shipped chat template)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ensure_bundled_model())
