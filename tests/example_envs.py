"""Loading the environments under `examples/` the way the CLI loads them (`module:factory`
from that folder), and watching the sessions they open."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from seal_graph.registry import get_environment

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(monkeypatch: pytest.MonkeyPatch, spec: str) -> Any:
    """The environment `spec` (e.g. 'notes_env:make_env'), imported from `examples/`."""
    monkeypatch.chdir(EXAMPLES)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return get_environment(spec)


def track_sessions(env: Any) -> list[Any]:
    """Every session `env` opens from now on, in order (to check each one's cleanup)."""
    opened: list[Any] = []
    original = env.open

    def tracking(task: Any) -> Any:
        session = original(task)
        opened.append(session)
        return session

    env.open = tracking
    return opened
