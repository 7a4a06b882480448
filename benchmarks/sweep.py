"""Settings chosen on `val`, never on `test`: the warm start's strength, the rollout
temperature, the learning rate, the group size and the iterations of the `cpu` preset.

    .venv/bin/python benchmarks/sweep.py --warm-epochs 2 --temperatures 0.7 1.0
    .venv/bin/python benchmarks/sweep.py --warm-epochs --more-temperatures 2 \
        --temperatures 0.5 0.7 1.0
    .venv/bin/python benchmarks/sweep.py --warm-epochs --train-from 2 \
        --learning-rates 2e-5 5e-5 1e-4 --group-sizes 4 8 --iterations 3

The warm start's own stopping point is chosen by `benchmarks/warm_start_plateau.py`
(per epoch, on `val`). For each number of warm-start SFT epochs given here (the
preset's settings otherwise, on its kv-calc `train` references), a fresh warm start is
merged and served, then evaluated on `val` only: greedy success per category with its
interval (the preset's token and step limits), and for each temperature the sampled
success and the share of task groups whose rewards are mixed (the only groups GRPO
learns from). Rows go to
`docs/results/sweep.{json,md}` as each setting finishes (a rerun replaces the rows it
repeats and keeps the others).

With `--train-from STEPS`, the loop itself runs from that warm start (its merged model
from the grid above, under `runs/sweep/epochs-EPOCHS/`): the preset's loop for each learning
rate and group size (the same episodes per iteration: a group of 8 gets half the tasks
of a group of 4), `--iterations` of them, with greedy `val` success after each.

The rules the preset followed (`training/presets/cpu.toml`) while the warm start was
counted in steps (the rows marked "steps", kept as measured): the most warm-start steps
whose greedy `val` success stays at or below 70% on every category (room to learn on
each), then the temperature with the most mixed groups at those steps; then the learning
rate and group size with the highest greedy `val` success after the preset's iterations,
the preset's own where the intervals cannot tell them apart.
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

from learning_runs import rollouts, train_warm_start
from machine import machine

from seal_graph import ModelServer, ServerSettings
from seal_graph.registry import get_environment
from seal_graph.runners.evaluation import (
    category,
    mixed_groups,
    outcomes,
    select_tasks,
    summarize,
)
from seal_graph.store import TraceStore

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs/results"
ROOM = 70.0
"""Greedy `val` success (%) a warm start may reach on a category and still leave room."""


def preset(epochs: int) -> Any:
    from seal_graph.training.config import load_config

    return load_config(None, "cpu", warm_start={"epochs": epochs})


def warm_label(row: dict[str, Any], key: str = "") -> str:
    """A row's warm start: `N epochs`, or `N steps` for rows measured while it was
    counted in steps."""
    epochs, steps = row.get(f"{key}epochs"), row.get(f"{key}steps")
    return f"{epochs} epochs" if epochs is not None else f"{steps} steps"


def warm_order(row: dict[str, Any], key: str = "") -> tuple[int, int]:
    epochs = row.get(f"{key}epochs")
    return (1, epochs) if epochs is not None else (0, row[f"{key}steps"])


def sampled_signal(episodes: list, tasks: dict[str, str]) -> dict[str, Any]:
    """Sampled success per category and the share of groups with mixed rewards."""
    mixed = mixed_groups(episodes, tasks.__getitem__)
    return {
        "success": 100 * outcomes(episodes)["success"],
        "mixed_groups": {name: 100 * share for name, share in mixed.items()},
        "groups": len({episode.task_id for episode in episodes}),
    }


def measure(epochs: int, args: argparse.Namespace) -> dict[str, Any]:
    """One warm start: trained, served, evaluated on `val`."""
    config = preset(epochs)
    work = args.out / f"epochs-{epochs}"
    shutil.rmtree(work, ignore_errors=True)
    began = time.perf_counter()
    sft = train_warm_start(work / "model", work / "sft", adapter=work / "adapter", config=config)
    env = get_environment("kv-calc")
    tasks = select_tasks(env, "val", None, args.limit)
    store = TraceStore(work / "traces.sqlite")
    row: dict[str, Any] = {
        "epochs": epochs,
        "sft_seconds": sft.get("seconds"),
        "sampled": {},
        "commands": [args.command],
    }
    serving = ServerSettings(model=str(work / "model"), enable_lora=False)
    with ModelServer.start(serving) as server:
        greedy = config.rollout.greedy(config.eval.max_tokens)
        asyncio.run(rollouts(server, [t.id for t in tasks], store, "greedy", greedy))
        per_category, overall = summarize(store.episodes("greedy"), tasks)
        row.update(
            greedy=per_category, greedy_overall=overall["accuracy"], serving_dtype=server.dtype
        )
        row["sampled"] = sampled_rows(server, config, tasks, store, args)
    store.close()
    row["room_on_every_category"] = all(c["accuracy"] <= ROOM for c in row["greedy"].values())
    row["minutes"] = (time.perf_counter() - began) / 60
    return row


def sampled_rows(
    server: ModelServer, config: Any, tasks: list, store: TraceStore, args: argparse.Namespace
) -> dict[str, Any]:
    """Per temperature, sampled success and mixed groups on the first `sampled_tasks`."""
    found = {}
    for temperature in args.temperatures:
        name = f"t{temperature}"
        sampling = config.rollout.model_copy(
            update={"temperature": temperature, "group_size": args.group}
        )
        ids = [t.id for t in tasks][: args.sampled_tasks]
        asyncio.run(rollouts(server, ids, store, name, sampling, mode="train"))
        found[str(temperature)] = sampled_signal(
            store.episodes(name), {t.id: category(t) for t in tasks}
        )
    return found


def more_temperatures(epochs: int, row: dict[str, Any], args: argparse.Namespace) -> dict:
    """`--temperatures` on a kept warm start (its merged model under `--out`), added to
    its row: no new SFT, so the row's greedy results stay those of the same model."""
    work = args.out / f"epochs-{epochs}"
    if not (work / "model" / "config.json").is_file():
        raise SystemExit(f"{work / 'model'} holds no model: run the grid with {epochs} first")
    tasks = select_tasks(get_environment("kv-calc"), "val", None, args.limit)
    store = TraceStore(work / "traces.sqlite")  # a temperature measured before is kept
    with ModelServer.start(ServerSettings(model=str(work / "model"), enable_lora=False)) as server:
        added = sampled_rows(server, preset(epochs), tasks, store, args)
    store.close()
    commands = [*row.get("commands", []), args.command]
    return {**row, "sampled": {**row["sampled"], **added}, "commands": commands}


def measure_training(epochs: int, lr: float, group: int, args: argparse.Namespace) -> dict:
    """The preset's loop from the `epochs` warm start at one learning rate and group size,
    evaluated greedily on `val` after every iteration."""
    from seal_graph.training.config import load_config
    from seal_graph.training.metrics import history_of
    from seal_graph.training.run import run_training

    model = args.out / f"epochs-{epochs}" / "model"
    if not (model / "config.json").is_file():
        raise SystemExit(f"{model} holds no model: run the warm-start grid with {epochs} first")
    base = preset(epochs)
    episodes = base.rollout.tasks_per_iteration * base.rollout.group_size
    config = load_config(
        None,
        "cpu",
        model=str(model),
        iterations=args.iterations,
        warm_start={"epochs": 0},
        optim={"learning_rate": lr},
        rollout={"group_size": group, "tasks_per_iteration": max(1, episodes // group)},
        eval={"split": "val", "every": 1, "limit": args.limit, "baseline": False},
    )
    out = args.out / f"train-{epochs}-lr{lr:g}-g{group}"
    shutil.rmtree(out, ignore_errors=True)
    began = time.perf_counter()
    history = history_of(run_training(config, out=out)["history"])
    val = {
        t.id: category(t) for t in select_tasks(get_environment("kv-calc"), "val", None, args.limit)
    }
    rows = []
    for record in history:
        evaluation = record.evaluate
        assert evaluation is not None  # every iteration is evaluated (eval.every = 1)
        by_category: dict[str, list[float]] = defaultdict(list)
        for task_id, outcome in evaluation.per_task.items():
            by_category[val[task_id]].append(outcome)
        rows.append(
            {
                "iteration": record.iteration,
                "greedy": 100 * evaluation.success,
                "ci": [100 * x for x in evaluation.ci] if evaluation.ci else None,
                "by_category": {
                    c: 100 * statistics.fmean(v) for c, v in sorted(by_category.items())
                },
                "train_success": 100 * record.rollout.train_success,
                "zero_signal_groups": f"{record.train.zero_signal_groups}/{record.train.groups}",
            }
        )
    return {
        "warm_epochs": epochs,
        "learning_rate": lr,
        "group_size": group,
        "tasks_per_iteration": config.rollout.tasks_per_iteration,
        "iterations": rows,
        "minutes": (time.perf_counter() - began) / 60,
        "commands": [args.command],
    }


def write(
    rows: list[dict[str, Any]], training: list[dict[str, Any]], args: argparse.Namespace
) -> None:
    rows = sorted(rows, key=warm_order)
    training = sorted(
        training, key=lambda r: (warm_order(r, "warm_"), r["learning_rate"], r["group_size"])
    )
    (RESULTS / "sweep.json").write_text(
        json.dumps(
            {"machine": machine(), "limit": args.limit, "rows": rows, "training": training},
            indent=2,
        )
    )
    categories = sorted({c for r in rows for c in r["greedy"]})
    temperatures = sorted({t for r in rows for t in r["sampled"]})
    commands = list(dict.fromkeys(c for r in [*rows, *training] for c in r.get("commands", [])))
    lines = [
        "# Settings chosen on `val`: warm start, temperature, learning rate, group size, "
        "iterations",
        "",
        "Measured by (success rates, which other load does not change):",
        "",
        *(f"{i + 1}. `{command}`" for i, command in enumerate(commands)),
        "",
        f"kv-calc `val`: {args.limit or 'all'} tasks round-robin over the categories, "
        f"greedy; sampled: the first N of them x {args.group} episodes each (mixed = a "
        "group whose rewards differ, the only kind GRPO learns from). Never `test`. The "
        "`cpu` preset applies the rules of `benchmarks/sweep.py` to these tables; its "
        "comments (`training/presets/cpu.toml`) say what each setting took.",
        "",
        "| warm start | greedy overall | "
        + " | ".join(f"greedy {c} [95%]" for c in categories)
        + " | "
        + " | ".join(f"T={t}: sampled / mixed of N groups" for t in temperatures)
        + f" | all categories <= {ROOM:.0f}% | commands |",
        "|" + "---|" * (4 + len(categories) + len(temperatures)),
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
            f" of {row['sampled'][t].get('groups', args.sampled_tasks)}"
            if t in row["sampled"]
            else "—"
            for t in temperatures
        ]
        lines.append(
            f"| {warm_label(row)} | {row['greedy_overall']:.0f}% | "
            + " | ".join(cells + signal)
            + f" | {'yes' if row['room_on_every_category'] else 'no'} | "
            f"{_numbers(row, commands)} |"
        )
    if training:
        lines += training_table(training, commands, args)
    (RESULTS / "sweep.md").write_text("\n".join(lines) + "\n")


def _load(run: dict[str, Any]) -> str:
    """What else ran beside a run, when something did (its minutes are not quiet)."""
    return f" (under load: {run['load']})" if "load" in run else ""


def _numbers(row: dict[str, Any], commands: list[str]) -> str:
    """Which of the listed commands measured a row."""
    return ", ".join(str(commands.index(c) + 1) for c in row.get("commands", []))


def training_table(
    training: list[dict[str, Any]], commands: list[str], args: argparse.Namespace
) -> list[str]:
    """The loop's settings on `val`: one line per run and iteration."""
    categories = sorted({c for r in training for i in r["iterations"] for c in i["by_category"]})
    lines = [
        "",
        "## Learning rate, group size and iterations",
        "",
        f"The `cpu` preset's loop from a warm start of the grid above (its merged model), "
        f"one run per learning rate and group size, the same episodes per iteration; greedy "
        f"success on the same {args.limit} `val` tasks after each iteration (95% interval "
        "over tasks).",
        "",
        "| warm start | learning rate | group size x tasks | iteration | greedy val [95%] | "
        + " | ".join(categories)
        + " | train success | zero-signal groups | run minutes | command |",
        "|" + "---|" * (9 + len(categories)),
    ]
    for run in training:
        for it in run["iterations"]:
            ci = f" [{it['ci'][0]:.0f}, {it['ci'][1]:.0f}]" if it["ci"] else ""
            lines.append(
                f"| {warm_label(run, 'warm_')} | {run['learning_rate']:g} | "
                f"{run['group_size']} x {run['tasks_per_iteration']} | {it['iteration']} | "
                f"{it['greedy']:.0f}%{ci} | "
                + " | ".join(f"{it['by_category'].get(c, 0):.0f}%" for c in categories)
                + f" | {it['train_success']:.0f}% | {it['zero_signal_groups']} | "
                f"{run['minutes']:.0f}{_load(run)} | {_numbers(run, commands)} |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warm-epochs", type=int, nargs="*", default=[])
    parser.add_argument("--train-from", type=int, help="Warm-start epochs the loop runs from.")
    parser.add_argument(
        "--more-temperatures", type=int, help="Warm-start epochs whose kept model samples "
        "at --temperatures (added to its row, no new SFT).",
    )  # fmt: skip
    parser.add_argument("--learning-rates", type=float, nargs="+", default=[5e-5])
    parser.add_argument("--group-sizes", type=int, nargs="+", default=[4])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.7])
    parser.add_argument("--limit", type=int, default=48, help="val tasks evaluated greedily")
    parser.add_argument("--sampled-tasks", type=int, default=12)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--out", type=Path, default=ROOT / "runs/sweep")
    args = parser.parse_args()
    args.command = (
        f".venv/bin/python benchmarks/sweep.py {' '.join(sys.argv[1:])}".strip()
        + f"  ({time.strftime('%Y-%m-%d %H:%M')}; {machine()})"
    )
    existing = RESULTS / "sweep.json"
    earlier = json.loads(existing.read_text()) if existing.is_file() else {}
    rows, training = earlier.get("rows", []), earlier.get("training", [])
    for epochs in args.warm_epochs:
        print(f"sweep: warm start of {epochs} SFT epochs", flush=True)
        row = measure(epochs, args)
        rows = [r for r in rows if r.get("epochs") != epochs] + [row]
        write(rows, training, args)
        print(f"sweep: {epochs} epochs -> {row['greedy_overall']:.0f}% greedy on val", flush=True)
    if args.more_temperatures is not None:
        epochs = args.more_temperatures
        (row,) = [r for r in rows if r.get("epochs") == epochs]
        others = [r for r in rows if r.get("epochs") != epochs]
        rows = [*others, more_temperatures(epochs, row, args)]
        write(rows, training, args)
    if args.train_from is None:
        return
    for lr in args.learning_rates:
        for group in args.group_sizes:
            print(f"sweep: the loop at learning rate {lr:g}, group size {group}", flush=True)
            run = measure_training(args.train_from, lr, group, args)
            key = (run["warm_epochs"], run["learning_rate"], run["group_size"])
            training = [
                r
                for r in training
                if (r.get("warm_epochs"), r["learning_rate"], r["group_size"]) != key
            ] + [run]
            write(rows, training, args)
            final = run["iterations"][-1]["greedy"]
            print(f"sweep: lr {lr:g}, group {group} -> {final:.0f}% greedy on val", flush=True)


if __name__ == "__main__":
    main()
