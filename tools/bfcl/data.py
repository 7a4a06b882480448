"""BFCL v3 multi-turn data as shipped by the PyPI package `bfcl-eval` (offline).

Four categories of 200 tasks each (base, miss_func, miss_param, long_context), their
ground truth, the tool docs of every backend class, and the paper's 400/400 split (shipped
with seal-graph as `bfcl_400_split.json`).
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import os
from functools import cache, lru_cache
from typing import Any

from seal_graph import paths
from seal_graph.errors import ConfigError, InstallError

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
#: What BFCL sends the model at a miss_func turn, when held-out tools appear.
ADDED_FUNCTIONS_PROMPT = "I have updated some more functions you can choose from. What about now?"


def require_bfcl() -> None:
    """Fail with the install command when `bfcl-eval` is missing."""
    os.environ.setdefault("BFCL_PROJECT_ROOT", str(paths.home() / "bfcl"))
    if importlib.util.find_spec("bfcl_eval") is None:
        raise InstallError(
            "the BFCL environment needs the PyPI package bfcl-eval (its data, backends and "
            "checker). Install it without its heavy provider SDKs: "
            "pip install --no-deps bfcl-eval==2026.3.23"
        )


def _data_file(relative: str) -> list[dict[str, Any]]:
    require_bfcl()
    text = importlib.resources.files("bfcl_eval").joinpath("data", relative).read_text("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def category_of(task_id: str) -> str:
    """`multi_turn_miss_func_12` -> `miss_func`."""
    return task_id.removeprefix("multi_turn_").rsplit("_", 1)[0]


@lru_cache(maxsize=1)
def entries() -> dict[str, dict[str, Any]]:
    """Every multi-turn entry by id, with its ground truth under `ground_truth`."""
    result: dict[str, dict[str, Any]] = {}
    for category in CATEGORIES:
        answers = {
            a["id"]: a["ground_truth"]
            for a in _data_file(f"possible_answer/BFCL_v4_multi_turn_{category}.json")
        }
        for entry in _data_file(f"BFCL_v4_multi_turn_{category}.json"):
            entry["ground_truth"] = answers[entry["id"]]
            result[entry["id"]] = entry
    return result


@cache
def function_docs(class_name: str) -> list[dict[str, Any]]:
    """BFCL's tool docs for one backend class."""
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    return _data_file(f"multi_turn_func_doc/{MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]}")


@lru_cache(maxsize=1)
def split() -> dict[str, list[str]]:
    """The paper's split: 400 train / 400 test ids (100 per category each), seed 0."""
    text = (
        importlib.resources.files("seal_graph.tools.bfcl")
        .joinpath("bfcl_400_split.json")
        .read_text("utf-8")
    )
    data = json.loads(text)
    return {"train": data["train"], "test": data["test"], "all": [*data["train"], *data["test"]]}


def select_ids(split_name: str, categories: list[str] | None = None) -> list[str]:
    """Task ids of a split, optionally restricted to categories (in split order)."""
    splits = split()
    if split_name not in splits:
        raise ConfigError(f"BFCL has no split {split_name!r}; use one of {', '.join(splits)}")
    unknown = set(categories or []) - set(CATEGORIES)
    if unknown:
        raise ConfigError(f"unknown BFCL categories {sorted(unknown)}; use {', '.join(CATEGORIES)}")
    return [i for i in splits[split_name] if not categories or category_of(i) in categories]
