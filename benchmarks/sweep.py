"""Settings chosen on `val`, never on `test`: the warm start's strength and the rollout
temperature of the `cpu` preset.

    .venv/bin/python benchmarks/sweep.py              # the grid behind the cpu preset
    .venv/bin/python benchmarks/sweep.py --warm-steps 24 --temperatures 0.7 1.0

For each number of warm-start SFT steps (the preset's settings otherwise, on kv-calc's
`train` references of all four categories), a fresh warm start is merged and served, then
evaluated on `val` only: greedy success per category with its interval (the preset's
token and step limits), and for each temperature the sampled success and the share of
task groups whose rewards are mixed (the only groups GRPO learns from). Rows go to
`docs/results/sweep.{json,md}` as each setting finishes (a rerun replaces the rows it
repeats and keeps the others).

The rule the preset follows (`training/presets/cpu.toml`): the most warm-start steps
whose greedy `val` success stays at or below 70% on every category (room to learn on
each), then the temperature with the most mixed groups at those steps. What is not swept
here (learning rate, group size, iterations) costs whole training runs per point and is
pinned where the preset says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from learning import rollouts, train_warm_start
from machine import machine

from seal_graph import ModelServer, ServerSettings
from seal_graph.evaluation import category, outcomes, select_tasks, summarize
from seal_graph.registry import get_environment
from seal_graph.store import TraceStore

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs/results"
ROOM = 70.0
"""Greedy `val` success (%) a warm start may reach on a category and still leave room."""


def preset(steps: int) -> Any:
    from seal_graph.training.config import load_config

    return load_config(None, "cpu", warm_start={"steps": steps})


def sampled_signal(episodes: list, tasks: dict[str, str]) -> dict[str, Any]:
    """Sampled success per category and the share of groups with mixed rewards."""
    rewards: dict[str, list[float]] = defaultdict(list)
    for episode in episodes:
        rewards[episode.task_id].append(episode.reward)
    mixed: dict[str, list[bool]] = defaultdict(list)
    for task_id, values in rewards.items():
        mixed[tasks[task_id]].append(len(set(values)) > 1)
        mixed["all"].append(len(set(values)) > 1)
    return {
        "success": 100 * outcomes(episodes)["success"],
        "mixed_groups": {name: 100 * statistics.fmean(v) for name, v in sorted(mixed.items())},
    }


def measure(steps: int, args: argparse.Namespace) -> dict[str, Any]:
    """One warm start: trained, served, evaluated on `val`."""
    config = preset(steps)
    work = args.out / f"steps-{steps}"
    shutil.rmtree(work, ignore_errors=True)
    began = time.perf_counter()
    sft = train_warm_start(work / "model", work / "sft", adapter=work / "adapter", config=config)
    env = get_environment("kv-calc")
    tasks = select_tasks(env, "val", None, args.limit)
    store = TraceStore(work / "traces.sqlite")
    row: dict[str, Any] = {"steps": steps, "sft_seconds": sft.get("seconds"), "sampled": {}}
    serving = ServerSettings(model=str(work / "model"), enable_lora=False)
    with ModelServer.start(serving) as server:
        greedy = config.rollout.greedy(config.eval.max_tokens)
        asyncio.run(rollouts(server, [t.id for t in tasks], store, "greedy", greedy))
        per_category, overall = summarize(store.episodes("greedy"), tasks)
        row.update(
            greedy=per_category, greedy_overall=overall["accuracy"], serving_dtype=server.dtype
        )
        for temperature in args.temperatures:
            name = f"t{temperature}"
            sampling = config.rollout.model_copy(
                update={"temperature": temperature, "group_size": args.group}
            )
            ids = [t.id for t in tasks][: args.sampled_tasks]
            asyncio.run(rollouts(server, ids, store, name, sampling, mode="train"))
            row["sampled"][str(temperature)] = sampled_signal(
                store.episodes(name), {t.id: category(t) for t in tasks}
            )
    store.close()
    row["room_on_every_category"] = all(c["accuracy"] <= ROOM for c in row["greedy"].values())
    row["minutes"] = (time.perf_counter() - began) / 60
    return row


def write(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    rows = sorted(rows, key=lambda r: r["steps"])
    (RESULTS / "sweep.json").write_text(
        json.dumps({"machine": machine(), "limit": args.limit, "rows": rows}, indent=2)
    )
    categories = sorted({c for r in rows for c in r["greedy"]})
    temperatures = sorted({t for r in rows for t in r["sampled"]})
    lines = [
        "# Warm start and temperature, chosen on `val`",
        "",
        f"`.venv/bin/python benchmarks/sweep.py {' '.join(sys.argv[1:])}`".replace(" `", "`")
        + f" ({time.strftime('%Y-%m-%d %H:%M')}, "
        f"{machine()}; success rates, which other load does not change). kv-calc `val`: "
        f"{args.limit or 'all'} tasks round-robin over the categories, greedy; sampled: "
        f"the first {args.sampled_tasks} of them x {args.group} episodes (mixed = a group "
        "whose rewards differ, the only kind GRPO learns from). Never `test`.",
        "",
        "| SFT steps | greedy overall | "
        + " | ".join(f"greedy {c} [95%]" for c in categories)
        + " | "
        + " | ".join(f"T={t}: sampled / mixed groups" for t in temperatures)
        + f" | all categories <= {ROOM:.0f}% |",
        "|" + "---|" * (3 + len(categories) + len(temperatures)),
    ]
    for row in rows:
        cells = [
            f"{row['greedy'][c]['accuracy']:.0f}% [{row['greedy'][c]['ci'][0]:.0f}, "
            f"{row['greedy'][c]['ci'][1]:.0f}]"
            if c in row["greedy"]
            else "—"
            for c in categories
        ]
        signal = [
            f"{row['sampled'][t]['success']:.0f}% / {row['sampled'][t]['mixed_groups']['all']:.0f}%"
            if t in row["sampled"]
            else "—"
            for t in temperatures
        ]
        lines.append(
            f"| {row['steps']} | {row['greedy_overall']:.0f}% | "
            + " | ".join(cells + signal)
            + f" | {'yes' if row['room_on_every_category'] else 'no'} |"
        )
    (RESULTS / "sweep.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warm-steps", type=int, nargs="+", default=[20, 22, 23, 25])
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.7])
    parser.add_argument("--limit", type=int, default=48, help="val tasks evaluated greedily")
    parser.add_argument("--sampled-tasks", type=int, default=12)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--out", type=Path, default=ROOT / "runs/sweep")
    args = parser.parse_args()
    existing = RESULTS / "sweep.json"
    rows = json.loads(existing.read_text())["rows"] if existing.is_file() else []
    for steps in args.warm_steps:
        print(f"sweep: warm start of {steps} SFT steps", flush=True)
        row = measure(steps, args)
        rows = [r for r in rows if r["steps"] != steps] + [row]
        write(rows, args)
        print(f"sweep: {steps} steps -> {row['greedy_overall']:.0f}% greedy on val", flush=True)


if __name__ == "__main__":
    main()
