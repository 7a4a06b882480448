"""A Griffe extension for the API pages (mkdocs.yml): `seal_graph.graphs`, `.tools` and
`.training` are installed from the folders `graphs/`, `tools/` and `training/` (the
package-dir mapping in pyproject.toml), which Griffe's static finder does not follow.
When it loads `seal_graph`, each one is loaded from where Python finds it and attached
under its installed name, so the pages show the import paths users type."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import griffe

MAPPED = ("graphs", "tools", "training")


class MappedSubpackages(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "seal_graph":
            return
        for name in MAPPED:
            spec = importlib.util.find_spec(f"seal_graph.{name}")
            if spec is None or not spec.submodule_search_locations:
                continue
            module = loader.load(Path(next(iter(spec.submodule_search_locations))))
            pkg.set_member(name, module)
