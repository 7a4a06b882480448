"""How much signal does GRPO get, by warm-start strength and rollout temperature?

    .venv/bin/python benchmarks/grpo_signal.py                        # kept warm start
    .venv/bin/python benchmarks/grpo_signal.py --warm-steps 0 16 20 --temperatures 0.7 1.0

A group of episodes of one task whose rewards are all equal has no group-relative
advantage, so no gradient. In the learning benchmark's seed-0 runs 81% of the groups were
such (at temperature 0.7, the `cpu` preset's), training success was 6% and the warm
start's greedy test success 4.7%: nearly every group failed throughout. Both knobs move
the success rate GRPO samples at: the warm start (the `cpu` preset's 12 SFT steps of 2
expert episodes; the preset notes 3/24 training successes after 12 steps, 23/24 after
24) and the temperature. This measures, on training tasks only (never `test` or `ood`),
the training success and the share of groups with mixed rewards for each pair, so the
benchmark's warm start and temperature are chosen from data. `--warm-steps 0` (the
default) is the learning benchmark's kept warm start; any other N is a fresh SFT of N
steps. Writes `docs/results/grpo_signal.{json,md}` after every measurement, keeping the
rows of earlier runs on the same tasks that this run does not repeat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from learning_runs import (
    SERVE_DTYPE,
    benchmark_config,
    merge_warm_start,
    rollouts,
    train_warm_start,
)
from machine import machine

from seal_graph import ModelServer, ServerSettings
from seal_graph.registry import get_environment
from seal_graph.store import TraceStore

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs/results"


def mixed_share(rewards_by_task: dict[str, list[float]]) -> float:
    """Share of groups whose rewards are not all equal (the ones GRPO learns from)."""
    return statistics.fmean(len(set(r)) > 1 for r in rewards_by_task.values())


def measure(server: ModelServer, tasks: list[str], temperature: float, group: int, work: Path):
    """One temperature's batch on the served checkpoint: success and mixed groups."""
    settings = benchmark_config().rollout.model_copy(
        update={"temperature": temperature, "group_size": group}
    )
    path = work / f"t{temperature}.sqlite"
    path.unlink(missing_ok=True)  # a rerun measures afresh
    store = TraceStore(path)
    began = time.perf_counter()
    asyncio.run(rollouts(server, tasks, store, "batch", settings, mode="train"))
    episodes = store.episodes("batch")
    store.close()
    rewards: dict[str, list[float]] = defaultdict(list)
    for episode in episodes:
        rewards[episode.task_id].append(episode.reward)
    return {
        "temperature": temperature,
        "episodes": len(episodes),
        "success": round(statistics.fmean(e.success for e in episodes), 3),
        "mixed_groups": round(mixed_share(rewards), 3),
        "seconds": round(time.perf_counter() - began, 1),
    }


def checkpoint(steps: int, out: Path) -> Path:
    """The kept warm start (steps 0) or a fresh SFT of `steps` steps, merged."""
    if steps == 0:
        model = out / "warm-start-model"
        if not (model / "config.json").exists():
            merge_warm_start(model)
        return model
    model = out / f"signal-warm-{steps}" / "model"
    if not (model / "config.json").exists():
        work = model.parent
        train_warm_start(model, work / "sft", steps=steps, adapter=work / "adapter")
    return model


def kept_rows(args: argparse.Namespace) -> list[dict]:
    """Rows measured earlier on the same sample of tasks, so a run that adds warm starts
    keeps the ones it does not repeat (each row names the command that measured it)."""
    path = RESULTS / "grpo_signal.json"
    if not path.exists():
        return []
    rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
    return [r for r in rows if (r["tasks"], r["group"]) == (args.tasks, args.group)]


def _warm_start(row: dict) -> str:
    if row["warm_steps"]:
        return str(row["warm_steps"])
    return f"kept then ({row['kept_steps']} steps)" if "kept_steps" in row else "kept then"


def kept_steps() -> int | None:
    """The SFT steps of the learning benchmark's kept warm start, as recorded."""
    path = RESULTS / "learning" / "warm-start.json"
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))["settings"].get("steps")


def write(rows: list[dict], args: argparse.Namespace) -> None:
    rows = sorted(rows, key=lambda r: (r["warm_steps"], r["temperature"]))
    (RESULTS / "grpo_signal.json").write_text(
        json.dumps({"rows": rows}, indent=2) + "\n", encoding="utf-8"
    )
    commands = list(dict.fromkeys(r["command"] for r in rows))
    lines = [
        "# GRPO's signal by warm start and rollout temperature",
        "",
        *(f"{i + 1}. `{c}`" for i, c in enumerate(commands)),
        "",
        f"{args.tasks} `train` tasks (a seeded sample) x {args.group} episodes per row, the "
        "`cpu` preset's other rollout settings, the base interface. A group is mixed when "
        "its episodes' rewards are not all equal: only those give GRPO a gradient. Warm "
        "start: SFT steps of the `cpu` preset's warm start (kept = the learning "
        "benchmark's shared warm start as it was when the row was measured, with its steps "
        "then; not necessarily today's). kv-calc: the environment the row was measured on.",
        "",
        "| warm start | temperature | episodes | training success | mixed groups | seconds "
        "| kv-calc | command |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {_warm_start(r)} | {r['temperature']} | {r['episodes']} | "
            f"{100 * r['success']:.0f}% | {100 * r['mixed_groups']:.0f}% | {r['seconds']} | "
            f"{r.get('kv_calc', '?')} | {commands.index(r['command']) + 1} |"
            for r in rows
        ),
    ]
    (RESULTS / "grpo_signal.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-steps", type=int, nargs="+", default=[0], help="0 = kept.")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.7])
    parser.add_argument("--tasks", type=int, default=16, help="Training tasks per row.")
    parser.add_argument("--group", type=int, default=4, help="Episodes per task.")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-learning"))
    args = parser.parse_args()
    ids = [t.id for t in get_environment("kv-calc").tasks("train")]
    tasks = random.Random("grpo-signal").sample(ids, min(args.tasks, len(ids)))
    command = f".venv/bin/python benchmarks/grpo_signal.py {' '.join(sys.argv[1:])}".strip()
    command += f"  ({time.strftime('%Y-%m-%d %H:%M')}; {machine(SERVE_DTYPE)})"
    sizes = {"tasks": args.tasks, "group": args.group}
    rows = kept_rows(args)
    for steps in args.warm_steps:
        model = checkpoint(steps, args.out)
        work = model.parent / "signal"
        work.mkdir(parents=True, exist_ok=True)
        settings = ServerSettings(model=str(model), enable_lora=False, dtype=SERVE_DTYPE)
        with ModelServer.start(settings) as server:
            for temperature in args.temperatures:
                row = measure(server, tasks, temperature, args.group, work)
                key = (steps, temperature)
                rows = [r for r in rows if (r["warm_steps"], r["temperature"]) != key]
                kept = {"kept_steps": kept_steps()} if steps == 0 else {}
                about = {"kv_calc": "four categories", **kept}
                rows.append({"warm_steps": steps, **row, **sizes, **about, "command": command})
                print(json.dumps(rows[-1]), flush=True)
                write(rows, args)


if __name__ == "__main__":
    main()
