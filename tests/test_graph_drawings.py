"""The shape of every graph `langgraph.json` serves, pinned by a snapshot of its drawing.

A missing snapshot fails rather than writing itself: after a deliberate change to a
graph, regenerate with `SEAL_GRAPH_UPDATE_SNAPSHOTS=1 pytest tests/test_graph_drawings.py`,
review the diff of `tests/snapshots/*.mmd`, and commit it.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = Path(__file__).parent / "snapshots"
GRAPHS = json.loads((ROOT / "langgraph.json").read_text())["graphs"]


def test_langgraph_json_serves_the_closed_loop_beside_its_parts() -> None:
    assert set(GRAPHS) == {"rollout", "diagnose_evolve", "train_loop"}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_graph_drawing_matches_its_snapshot(name: str) -> None:
    module = Path(GRAPHS[name].split(":")[0]).stem
    graph = importlib.import_module(f"seal_graph.graphs.{module}").graph
    drawing = graph.get_graph().draw_mermaid()
    snapshot = SNAPSHOTS / f"{name}_graph.mmd"
    if os.environ.get("SEAL_GRAPH_UPDATE_SNAPSHOTS") == "1":
        snapshot.write_text(drawing)
    assert snapshot.exists(), f"no snapshot {snapshot}; see this module's docstring"
    assert drawing == snapshot.read_text()
