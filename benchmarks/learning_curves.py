"""The RL budget and SEAL's mechanism, read on `val` per iteration (`benchmarks/learning.py
--curves N`): learning curves of the table's rows from its warm start, and at each
iteration what SEAL's chain acts through.

A curve run is a table run (`learning_runs.run_config`: the same warm start, settings and
budget per iteration) taken to `N` iterations and evaluated greedily on `--curve-limit`
`val` tasks after every `--curve-every`-th iteration and the last, on its own server
(`test` is never read). Each iteration records:

- `val`: greedy success, its interval, per category, and the abstention metrics
  (`seal_graph.abstention`);
- the training batch: success, abstention metrics, the share of groups with mixed
  rewards per category (the only ones GRPO learns from);
- the step: groups without signal, rho, the share of advantage mass the diagnosis weights
  moved per category (`WeightedAdvantages.moved_share`), the interface version;
- seconds: the iteration's stages, with and without its `val` evaluation.

The warm start's own `val` point (iteration 0) is measured once, on the first run's
server, and shared. A run's file (`docs/results/learning/curves/METHOD-sSEED.json`) is
rewritten after every iteration (`finished: false`) and committed when the run ends; an
interrupted session's file keeps the iterations it measured.

`--curve-optim KEY=VALUE ...` runs a row with other optimiser settings (a learning rate, a
KL coefficient: the val experiments that choose the table's settings); its file and label
name them (`seal@beta=0.04-s0.json`), and the budget reads the table's pinned settings'
curves only.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

from learning_runs import (  # benchmarks/learning_runs.py
    RESULTS,
    kv_calc_category,
    load,
    run_config,
    stored_abstention,
)
from machine import machine  # benchmarks/machine.py

from seal_graph.runners.evaluation import outcomes
from seal_graph.store import TraceStore

CURVES = RESULTS / "curves"
WARM_POINT = CURVES / "warm-start-val.json"
"""The warm start on the curves' `val` tasks: every curve's iteration 0."""
LOOP_STAGES = ("rollout", "diagnose", "evolve", "train", "swap")
"""An iteration's stages besides its `val` evaluation (`training.report.STAGES` less it)."""


def optim_overrides(pairs: list[str] | None) -> dict[str, float]:
    """`--curve-optim learning_rate=2e-5 beta=0.04` as a mapping checked against the
    optimiser's settings (a wrong key or value stops before any run starts)."""
    from pydantic import ValidationError

    from seal_graph.training.settings import OptimConfig

    numeric = [k for k, f in OptimConfig.model_fields.items() if f.annotation is float]
    found: dict[str, float] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or key not in numeric:
            raise SystemExit(
                f"--curve-optim {pair!r}: write KEY=VALUE with KEY one of the numeric [optim] "
                f"settings ({', '.join(numeric)})"
            )
        try:
            found[key] = float(value)
            OptimConfig(**{key: found[key]})
        except (ValueError, ValidationError) as error:
            raise SystemExit(f"--curve-optim {pair!r}: {error}") from None
    return dict(sorted(found.items()))


def curve_name(method: str, optim: dict[str, float]) -> str:
    """A row's name in file names: the method, then any optimiser settings it changes."""
    return method + "".join(f"@{k}={v:g}" for k, v in optim.items())


def curve_label(record: dict[str, Any]) -> str:
    """A row's name on the page: the method, then any optimiser settings it changes."""
    optim = record.get("optim") or {}
    changed = ", ".join(f"{k}={v:g}" for k, v in optim.items())
    return f"{record['method']} ({changed})" if changed else record["method"]


def curve_config(method: str, seed: int, args: argparse.Namespace) -> Any:
    """The table's run config, to `--curves` iterations, evaluated on `val` every
    `--curve-every` iterations and after the last, with `--curve-optim`'s settings."""
    args = argparse.Namespace(**{**vars(args), "iterations": args.curves})
    config = run_config(method, seed, args)
    config.optim = config.optim.model_copy(update=args.curve_optim)
    config.eval = config.eval.model_copy(
        update={
            "split": "val",
            "every": args.curve_every,
            "limit": args.curve_limit,
            "final": True,
            "final_splits": [],
            "samples": 0,
            "baseline": not WARM_POINT.exists(),
        }
    )
    return config


def per_category(per_task: dict[str, float]) -> dict[str, float]:
    """Greedy success (%) per kv-calc category from a per-task outcome map."""
    found: dict[str, list[float]] = {}
    for task_id, value in per_task.items():
        found.setdefault(kv_calc_category(task_id), []).append(value)
    return {name: 100 * sum(v) / len(v) for name, v in sorted(found.items())}


def iteration_point(record: Any) -> dict[str, Any]:
    """What one finished iteration (`IterationMetrics`) says about the chain."""
    evaluate, rollout, train = record.evaluate, record.rollout, record.train
    loop_seconds = sum(record.stage_seconds(s) for s in LOOP_STAGES)
    return {
        "iteration": record.iteration,
        "policy_version": record.policy_version,
        "interface_version": record.interface_version,
        "val": None
        if evaluate is None
        else {
            "success": evaluate.success,
            "ci": evaluate.ci,
            "per_category": per_category(evaluate.per_task),
            "abstention": evaluate.abstention,
        },
        "train_success": rollout.train_success,
        "train_abstention": rollout.abstention,
        "mixed_groups": rollout.mixed_groups,
        "groups": train.groups,
        "zero_signal_groups": train.zero_signal_groups,
        "stepped": train.stepped,
        "rho": train.rho,
        "reweighted_share": train.reweighted_share,
        "moved_advantage": train.moved_advantage,
        "labels": record.diagnose.label_prevalence,
        "swap_ok": record.swap.ok,
        "seconds": loop_seconds,
        "seconds_with_val": loop_seconds + record.stage_seconds("evaluate"),
    }


def curve_record(
    method: str, seed: int, run_dir: Path, args: argparse.Namespace, finished: bool
) -> dict[str, Any]:
    """A curve run's file from its metrics so far."""
    from seal_graph.training.metrics import history_of

    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    history = history_of([json.loads(line) for line in lines if line.strip()])
    return {
        "method": method,
        "seed": seed,
        "optim": args.curve_optim,
        "finished": finished,
        "iterations_planned": args.curves,
        "val_tasks": args.curve_limit,
        "val_every": args.curve_every,
        "points": [iteration_point(r) for r in history],
        "commit": args.code,
        "serving_dtype": args.dtype,
        "machine": machine(args.dtype),
        "command": f"benchmarks/learning.py {args.command}",
        "note": args.note,
    }


def curve_run(method: str, seed: int, args: argparse.Namespace) -> Path:
    """One curve: the loop to `--curves` iterations, its file rewritten after each."""
    from seal_graph.training.run import run_training

    CURVES.mkdir(parents=True, exist_ok=True)
    target = curve_file(method, seed, args)
    out = args.out / f"curve-{target.stem}"
    config = curve_config(method, seed, args)
    done = threading.Event()

    def follow() -> None:  # rewrite the file whenever an iteration finishes
        seen = 0
        while not done.wait(15):
            metrics = out / "metrics.jsonl"
            count = len(metrics.read_text().splitlines()) if metrics.exists() else 0
            if count > seen:
                seen = count
                write(target, curve_record(method, seed, out, args, finished=False))

    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()
    began = time.perf_counter()
    try:
        run_training(config, out=out, resume=(out / "config.json").exists())
    finally:
        done.set()
        watcher.join()
    if not WARM_POINT.exists():
        write(WARM_POINT, warm_point(out, method, seed, args))
    record = curve_record(method, seed, out, args, finished=True)
    record["process_minutes"] = (time.perf_counter() - began) / 60
    write(target, record)
    return target


def warm_point(out: Path, method: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """The warm start on the curves' `val` tasks, from the run's stored evaluation before
    its first iteration (`eval-baseline`)."""
    store = TraceStore(out / "traces.sqlite")
    run_id = f"{out.name}/eval-baseline"
    result = outcomes(store.episodes(run_id))
    abstention = stored_abstention(store, run_id)
    store.close()
    return {
        "success": result["success"],
        "ci": result["ci"],
        "per_category": per_category(result["per_task"]),
        "abstention": abstention,
        "val_tasks": args.curve_limit,
        "measured_by": f"{method} seed {seed}'s server before its first iteration",
    }


def curve_file(method: str, seed: int, args: argparse.Namespace) -> Path:
    return CURVES / f"{curve_name(method, args.curve_optim)}-s{seed}.json"


def finished_curves() -> list[dict[str, Any]]:
    return [load(p) for p in sorted(CURVES.glob("*-s[0-9]*.json"))]


def write(path: Path, record: dict[str, Any]) -> None:
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
