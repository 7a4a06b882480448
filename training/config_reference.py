"""The config reference page, generated from the pydantic models themselves.

    .venv/bin/python -m seal_graph.training.config_reference > docs/config.md

Every key of a training config (TOML, `--config`, or `train --set key=value`): its type,
default, description, and its value in each preset side by side. A test regenerates
the page and compares it with `docs/config.md`, so the page cannot fall behind the code.
"""

from __future__ import annotations

import json
import sys
from typing import Any, get_args

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from seal_graph.training.config import PRESETS, TrainConfig, load_config


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The settings section a field holds (a pydantic model), if it holds one."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _type_name(annotation: Any) -> str:
    plain = not get_args(annotation) and isinstance(annotation, type)
    text = annotation.__name__ if plain else str(annotation)
    return text.replace("typing.", "").replace("|", "\\|")


def _shown(value: Any) -> str:
    if value is PydanticUndefined:
        return "(required)"
    return f"`{json.dumps(value, default=str)}`" if value is not None else "`null`"


def _default(field: FieldInfo) -> Any:
    if field.default_factory is not None:
        return field.default_factory()  # type: ignore[call-arg]
    return field.default


def _rows(model: type[BaseModel], prefix: str, presets: dict[str, dict]) -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        key = f"{prefix}{name}"
        section = _model_of(field.annotation)
        if section is not None and not isinstance(_default(field), dict | list):
            rows += _rows(section, f"{key}.", {p: (v or {}).get(name) for p, v in presets.items()})
            continue
        values = [_shown((v or {}).get(name)) for v in presets.values()]
        description = (field.description or "").replace("\n", " ").replace("|", "\\|")
        rows.append(
            f"| `{key}` | {_type_name(field.annotation)} | {_shown(_default(field))} | "
            + " | ".join(values)
            + f" | {description} |"
        )
    return rows


def reference() -> str:
    """The page: one table row per key, sections flattened to dotted keys."""
    presets = {name: load_config(None, name).model_dump(mode="json") for name in PRESETS}
    lines = [
        "# Training config reference",
        "",
        "Generated from the pydantic models by "
        "`python -m seal_graph.training.config_reference` (a test checks it is current). "
        "Every key can go in a TOML file (`--config`, sections as `[optim]`), start from a "
        'preset (`preset = "cpu"`), or be set on the command line: '
        "`seal-graph train --set optim.learning_rate=1e-4 --set rollout.group_size=8`.",
        "",
        "| key | type | default | "
        + " | ".join(f"preset `{p}`" for p in presets)
        + " | description |",
        "|" + "---|" * (4 + len(presets)),
        *_rows(TrainConfig, "", presets),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())
