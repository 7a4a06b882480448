"""Human-readable output of a diagnose → evolve cycle: the label table and the diff."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from seal_graph.labels import DESCRIPTIONS
from seal_graph.store import TraceStore


def label_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(
        "label", "turns", "prevalence", "mean reward", "meaning", title="turn labels of the batch"
    )
    for row in rows:
        table.add_row(
            row["label"],
            str(row["count"]),
            f"{row['prevalence']:.0%}",
            f"{row['mean_reward']:.2f}",
            DESCRIPTIONS.get(row["label"], ""),
        )
    return table


def render_evolution(console: Console, result: dict[str, Any], store: Path, run: str) -> None:
    """Print the label table, what changed in the interface, and the interface now."""
    console.print(label_table(result["label_table"]))
    if not result.get("labels_written", True):
        console.print("labels: the batch's stored labels were kept (these were not written)")
    if not result["changed"]:
        console.print(f"interface: no change (still version {result['previous_version']})")
        return
    console.print(
        f"[bold]interface v{result['previous_version']} -> "
        f"v{result['version']}[/]\n{result['summary']}"
    )
    if not result.get("interface_written", True):
        console.print(
            f"interface: the run already has a version {result['version']}, which was kept "
            "(this proposal was not stored)"
        )
        return
    traces = TraceStore(store)
    try:
        current = traces.latest_interface(traces.interface_lineage(run))
    finally:
        traces.close()
    for adaptation in current.adaptations:
        console.print(
            f"  [{adaptation.kind}] {adaptation.key}: {adaptation.text}",
            markup=False,
            highlight=False,
        )
