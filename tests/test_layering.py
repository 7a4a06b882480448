"""The package is layered: a module imports only from its own layer or the ones below.

    0  ground floor   records, labels, settings, environment, store, diagnosis, interface,
                      sessions, tool execution, reference replay, evolution, abstention
                      rates (no I/O but SQLite, no model client)
    1  services       model client, environment registry, serving, built-in environments
    2  graphs         the rollout and diagnose→evolve graphs
    3  runners        rollout batches, evaluation, the demo
    4  training       the training subpackage (torch, TRL, PEFT behind it)
    5  entry points   the train-loop graph, the CLI, the package's public surface

Read from the source (every `import`, also inside functions), so a shortcut that
would drag a model client into the store, or the training stack into a graph, fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"seal_graph": ROOT / "seal_graph", "seal_graph.graphs": ROOT / "graphs"}
PACKAGES |= {"seal_graph.tools": ROOT / "tools", "seal_graph.training": ROOT / "training"}

LAYERS: dict[str, int] = {
    **dict.fromkeys(
        [
            "seal_graph.errors",
            "seal_graph.labels",
            "seal_graph.paths",
            "seal_graph.records",
            "seal_graph.settings",
            "seal_graph.environment",
            "seal_graph.tool_execution",
            "seal_graph.sessions",
            "seal_graph.reference",
            "seal_graph.interface",
            "seal_graph.diagnosis",
            "seal_graph.judge",
            "seal_graph.store",
            "seal_graph.evolution",
            "seal_graph.evolution_report",
            "seal_graph.bundled_model",
            "seal_graph.stats",
            "seal_graph.abstention",
        ],
        0,
    ),
    **dict.fromkeys(
        ["seal_graph.client", "seal_graph.registry", "seal_graph.serving", "seal_graph.tools"], 1
    ),
    **dict.fromkeys(["seal_graph.graphs.rollout", "seal_graph.graphs.diagnose_evolve"], 2),
    "seal_graph.runners": 3,
    "seal_graph.training": 4,
    **dict.fromkeys(
        [
            "seal_graph.graphs.train_loop",
            "seal_graph.training.run",
            "seal_graph.cli",
            "seal_graph.__main__",
            "seal_graph",
        ],
        5,
    ),
}


def layer(module: str) -> int:
    """The layer of a module: its own entry, else its closest listed package."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        if name in LAYERS:
            return LAYERS[name]
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [*path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The seal_graph modules a file imports (`from pkg import module` names the module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                names.add(child if child in known else node.module)
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return {n for n in names if n in known}


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    known = modules()
    upward = []
    for module, path in known.items():
        for target in imports(path, known):
            if layer(target) > layer(module):
                upward.append(f"{module} (layer {layer(module)}) imports {target}")
    assert upward == []
