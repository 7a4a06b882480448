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
    with ModelServer.start(ServerSettings(port=0, dtype="float32")) as running:
        yield running


@pytest.fixture(scope="session")
def tokenizer():
    """The bundled checkpoint's own tokenizer (with the shipped chat template)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ensure_bundled_model())


@pytest.fixture(scope="session")
def served_text(tokenizer):
    """The text vLLM serves for some completion token ids. A completion cut by `max_tokens`
    can end inside a multi-byte UTF-8 character; vLLM's detokenizer holds those bytes back
    while the tokenizer decodes them to U+FFFD, so the trailing replacement characters go."""

    def decode(token_ids: list[int]) -> str:
        return tokenizer.decode(token_ids, skip_special_tokens=True).rstrip("\ufffd")

    return decode


@pytest.fixture
def record_reliability(request):
    """Record a fault test's numbers (faults injected, cases tried, episodes lost) for
    `benchmarks/reliability.py`, which sets SEAL_GRAPH_RELIABILITY_LOG; else a no-op."""
    import json
    import os

    def record(**numbers: float) -> None:
        path = os.environ.get("SEAL_GRAPH_RELIABILITY_LOG")
        if path:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"test": request.node.nodeid, **numbers}) + "\n")

    return record
