"""`official` scoring agrees with BFCL's own evaluator, entry by entry.

Every one of the 800 multi-turn entries is replayed through the `bfcl` environment:
a third as published, the rest broken in one of twelve ways (a call dropped, an argument
changed, a call added, two turns swapped, a number sent as a string, an extra argument,
a turn's calls reordered, a call made a turn early — in `miss_func` the held-out
function, before it is offered — every number sent as a string, arguments that are not
a JSON object, a NaN argument, an argument name that is not an identifier). The episodes are
exported as `seal-graph eval` exports them, the exact `bfcl evaluate` command the export
prints is run (bfcl-eval's own CLI and checker; `tests/bfcl_official.py` stands in for
the provider SDKs it imports but never uses here), and its per-entry verdicts must equal
ours in every category.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from seal_graph.environment import Task
from seal_graph.reference import replay_calls
from seal_graph.registry import get_environment
from seal_graph.tools.bfcl import data
from seal_graph.tools.bfcl.export import DEFAULT_MODEL_NAME, SCORE_DIR, export_results

Calls = list[list[dict[str, Any]]]


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _first_arg(calls: Calls, wanted) -> tuple[dict, str] | None:
    return next(
        ((c, k) for turn in calls for c in turn for k, v in c["args"].items() if wanted(v)),
        None,
    )


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if _numeric(value):
        return value + 1
    if isinstance(value, str):
        return value + "_x"
    return value[:-1] if isinstance(value, list) and value else value


def break_calls(kind: str, task: Task) -> Calls:
    """The task's reference calls broken one way (unchanged where the way does not apply)."""
    calls: Calls = copy.deepcopy(task.reference)
    busy = [i for i, turn in enumerate(calls) if turn]
    if kind == "drop":
        calls[busy[-1]].pop()
    elif kind == "change":
        found = _first_arg(calls, lambda v: isinstance(v, bool | int | float | str | list))
        if found:
            call, key = found
            call["args"][key] = _changed(call["args"][key])
    elif kind == "extra_call":
        calls[busy[0]].append(copy.deepcopy(calls[busy[0]][-1]))
    elif kind == "swap_turns" and len(busy) > 1:
        calls[busy[0]], calls[busy[1]] = calls[busy[1]], calls[busy[0]]
    elif kind == "wrong_type":
        found = _first_arg(calls, _numeric) or _first_arg(calls, lambda v: isinstance(v, str))
        if found:
            call, key = found
            value = call["args"][key]
            call["args"][key] = str(value) if _numeric(value) else [value]
    elif kind == "extra_arg":
        calls[busy[0]][0]["args"]["unexpected"] = 1
    elif kind == "reorder":
        turn = next((t for t in calls if len(t) > 1), calls[busy[0]])
        turn.reverse()
    elif kind == "early" and len(busy) > 1:
        later = busy[1]
        if task.tools_added_at_turn:  # miss_func: the held-out function, before it is offered
            later = next(iter(task.tools_added_at_turn))
            later = later if calls[later] else busy[1]
        target = max((i for i in busy if i < later), default=None)
        if target is not None:
            calls[target].append(calls[later].pop(0))
    elif kind == "non_object_args":  # a model's `ls` with `[true]`: BFCL would run `ls()`
        call = calls[busy[0]][0]
        call["args"] = [True] if not call["args"] else list(call["args"].values())
    elif kind == "nan_arg":  # Python's JSON reads NaN; seal-graph refuses it as JSON does
        found = _first_arg(calls, _numeric) or _first_arg(calls, lambda v: True)
        if found:
            call, key = found
            call["args"][key] = float("nan")
    elif kind == "bad_arg_name":  # pasted into the call BFCL evaluates: `f(a='x')#='y')`
        call = calls[busy[0]][0]
        first = next(iter(call["args"]), "x")
        call["args"] = {
            f"{first}='x')#": "y",
            **{k: v for k, v in call["args"].items() if k != first},
        }
    elif kind == "numbers_as_strings":
        for turn in calls:
            for call in turn:
                call["args"] = {k: str(v) if _numeric(v) else v for k, v in call["args"].items()}
    return calls


KINDS = ("drop", "change", "extra_call", "swap_turns", "wrong_type", "extra_arg",
         "reorder", "early", "numbers_as_strings", "non_object_args", "nan_arg",
         "bad_arg_name")  # fmt: skip


def mixed_calls(index: int, task: Task) -> Calls:
    """A third of the entries as published; the rest cycle through the breaks."""
    if index % 3 == 0:
        return task.reference
    return break_calls(KINDS[(index // 3) % len(KINDS)], task)


def official_failures(command: str, root: Path) -> dict[str, set[str]]:
    """Run the printed `bfcl evaluate` command; the entry ids it failed, per category."""
    shim = root / "bin"
    shim.mkdir()
    runner = Path(__file__).with_name("bfcl_official.py")
    (shim / "bfcl").write_text(f'#!/bin/sh\nexec {sys.executable} {runner} "$@"\n')
    (shim / "bfcl").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    failures: dict[str, set[str]] = {}
    folder = root / SCORE_DIR / DEFAULT_MODEL_NAME / "multi_turn"
    for category in data.CATEGORIES:
        path = folder / f"BFCL_v4_multi_turn_{category}_score.json"
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        assert lines[0]["total_count"] == 200, lines[0]
        failures[category] = {line["id"] for line in lines[1:]}
    return failures


def test_official_scoring_agrees_with_bfcl_evaluate_on_every_entry(tmp_path) -> None:
    env = get_environment("bfcl")
    tasks = env.tasks("all")

    async def replay_all():
        return [await replay_calls(env, t, mixed_calls(i, t)) for i, t in enumerate(tasks)]

    replayed = asyncio.run(replay_all())
    export = export_results([episode for episode, _ in replayed], tmp_path, DEFAULT_MODEL_NAME)
    assert not export.partial and "--partial-eval" not in export.command
    theirs = official_failures(export.command, tmp_path)
    for category in data.CATEGORIES:
        ours = {
            episode.task_id
            for episode, verdict in replayed
            if data.category_of(episode.task_id) == category and not verdict.success
        }
        disagree = sorted(ours ^ theirs[category])
        assert not disagree, f"{category}: {len(disagree)} of 200 differ: {disagree[:10]}"
        assert 40 < len(ours) < 160, "the mix holds both verdicts"
