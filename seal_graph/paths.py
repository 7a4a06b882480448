"""Where seal-graph keeps its cache: converted models, server logs.

`$SEAL_GRAPH_HOME` wins; otherwise `~/.cache/seal-graph`. Kept in one place so tests and
CI can point every run at a scratch directory.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The seal-graph cache directory, created on first use."""
    root = Path(os.environ.get("SEAL_GRAPH_HOME") or Path.home() / ".cache" / "seal-graph")
    root.mkdir(parents=True, exist_ok=True)
    return root


def models_dir() -> Path:
    path = home() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def logs_dir() -> Path:
    path = home() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path
