"""The warm start's stopping point, chosen on `val` at its plateau (issue 50, points 1-3).

    .venv/bin/python benchmarks/warm_start_plateau.py --per-category 8 --epochs 6
    .venv/bin/python benchmarks/warm_start_plateau.py --epochs 3        # every reference

Trains the `cpu` preset's warm start (whole epochs over every expert sequence of
kv-calc's `train` references, or `--per-category` tasks of each category) once for
`--epochs` epochs, keeping the adapter after each epoch. Each epoch's adapter is merged
and loaded in place into one server (the loop's own full swap), then measured on `val`
only:

* greedy success per category (`--limit` tasks, round-robin over the categories) and
  which way the agent leans (`seal_graph.abstention`: call rate, no-call rate, replies
  naming what is missing);
* the learning signal GRPO would get from it: `--group` episodes per task at the
  preset's temperature on `--signal-tasks` tasks, and the share of groups whose rewards
  differ per category, under the paper's binary reward (`success`) and under
  `progress` (the share of turns passed).

The plateau is the first epoch after which one more epoch moves greedy `val` success by
less than `--plateau` points. Rows go to `docs/results/warm_start_plateau.json` (keyed
by reference set) and `.md` as each epoch finishes; the adapters stay under `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from learning_runs import merge_adapter, rollouts
from machine import machine

from seal_graph import ModelServer, ServerSettings
from seal_graph.abstention import abstention_rates
from seal_graph.bundled_model import ensure_bundled_model
from seal_graph.registry import get_environment
from seal_graph.runners.evaluation import category, mixed_groups, select_tasks, summarize
from seal_graph.serving.weights import ServerWeights
from seal_graph.store import TraceStore
from seal_graph.training.advantages import episode_reward

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs/results"


def preset(args: argparse.Namespace) -> Any:
    from seal_graph.training.config import load_config

    return load_config(
        None,
        "cpu",
        warm_start={"epochs": args.epochs, "tasks_per_category": args.per_category},
    )


def train(args: argparse.Namespace, config: Any) -> dict[str, Any]:
    """The warm start with an adapter kept after each epoch; its metrics."""
    from transformers import TrainerCallback

    from seal_graph.training.policy import Policy
    from seal_graph.training.sft import expert_dataset, warm_start

    policy = Policy(ensure_bundled_model(), config.lora)
    env = get_environment("kv-calc")
    dataset, experts = expert_dataset(env, config.warm_start, policy.tokenizer, config.seed)
    print(f"warm start: {experts.summary()}", flush=True)

    class KeepEachEpoch(TrainerCallback):
        def on_epoch_end(self, _args, state, control, **kwargs):
            epoch = round(state.epoch)
            policy.save_adapter(args.out / f"epoch-{epoch}" / "adapter")
            print(f"epoch {epoch}: step {state.global_step}", flush=True)

    metrics = warm_start(
        policy.model,
        policy.tokenizer,
        dataset,
        config.warm_start,
        args.out / "sft",
        callbacks=[KeepEachEpoch()],
    )
    return {**metrics, "by_category": experts.by_category()}


def measure(
    epoch: int, server: ModelServer, config: Any, args: argparse.Namespace
) -> dict[str, Any]:
    """One epoch's adapter, merged, swapped in, measured on `val`."""
    work = args.out / f"epoch-{epoch}"
    merged = merge_adapter(ensure_bundled_model(), work / "adapter", work / "merged")
    weights = ServerWeights(server.endpoint)
    try:
        weights.load("full", merged)
    finally:
        weights.close()
    env = get_environment("kv-calc")
    of = {t.id: category(t) for t in env.tasks("val")}
    store = TraceStore(work / "traces.sqlite")
    try:
        tasks = select_tasks(env, "val", None, args.limit)
        greedy = config.rollout.greedy(config.eval.max_tokens)
        greedy = greedy.model_copy(update={"concurrency": config.eval.concurrency})
        asyncio.run(rollouts(server, [t.id for t in tasks], store, "greedy", greedy))
        episodes = store.episodes("greedy")
        per_category, overall = summarize(episodes, tasks)
        signal_tasks = select_tasks(env, "val", None, args.signal_tasks)
        sampling = config.rollout.model_copy(update={"group_size": args.group})
        asyncio.run(
            rollouts(server, [t.id for t in signal_tasks], store, "sampled", sampling, "train")
        )
        sampled = store.episodes("sampled")
    finally:
        store.close()
    return {
        "epoch": epoch,
        "greedy_overall": overall["accuracy"],
        "greedy": {name: row["accuracy"] for name, row in per_category.items()},
        "abstention": abstention_rates(episodes, of.__getitem__),
        "signal": {
            "temperature": sampling.temperature,
            "group_size": args.group,
            "tasks": len(signal_tasks),
            "mixed_groups": {
                reward: mixed_groups(
                    sampled, of.__getitem__, lambda e, r=reward: episode_reward(e, r)
                )
                for reward in ("success", "progress")
            },
            "sampled_abstention": abstention_rates(sampled, of.__getitem__),
        },
    }


def plateau(rows: list[dict[str, Any]], points: float) -> int | None:
    """The first epoch after which one more moves greedy success by < `points`."""
    by_epoch = {row["epoch"]: row["greedy_overall"] for row in rows}
    for epoch in sorted(by_epoch):
        if epoch + 1 in by_epoch and abs(by_epoch[epoch + 1] - by_epoch[epoch]) < points:
            return epoch
    return None


def write(key: str, record: dict[str, Any]) -> None:
    """Keep the record under its key (a note added by hand to the file survives)."""
    path = RESULTS / "warm_start_plateau.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    if "note" in results.get(key, {}):
        record.setdefault("note", results[key]["note"])
    results[key] = record
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (RESULTS / "warm_start_plateau.md").write_text(page(results), encoding="utf-8")


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def page(results: dict[str, Any]) -> str:
    """The results as a page: per reference set, per epoch."""
    lines = [
        "# The warm start's plateau on `val`",
        "",
        "Written by `benchmarks/warm_start_plateau.py` (its docstring says what each column "
        "measures). Greedy success in %; call / no-call: the call rate on turns that need "
        "a call and the no-call rate on abstention turns; mixed: the share of sampled "
        "groups whose rewards differ (success reward / progress reward).",
    ]
    for key, record in results.items():
        rows = record["rows"]
        lines += [
            "",
            f"## {key}",
            "",
            f"{record['command']}; {record['machine']}; {record['sequences']} expert "
            f"sequences per epoch ({json.dumps(record['by_category'])}), "
            f"{record['train_seconds']:.0f} s for {record['epochs']} epochs "
            f"({record['trained_tokens']:.0f} tokens); plateau (< {record['plateau_points']} "
            "points from one epoch to the next): "
            + (
                f"epoch {record['plateau']}."
                if record.get("plateau")
                else f"not reached in the {len(rows)} epochs measured."
            )
            + (f" {record['note']}" if record.get("note") else ""),
            "",
            "| epoch | greedy | base | long_context | miss_func | miss_param | "
            "miss_func call / no-call | miss_param call / no-call | names missing | "
            "mixed miss_func | mixed miss_param | mixed all |",
            "|" + "---|" * 12,
        ]
        for row in rows:
            ab, mixed = row["abstention"], row["signal"]["mixed_groups"]

            def leans(name: str, ab=ab) -> str:
                r = ab.get(name, {})
                return f"{_pct(r.get('call_rate'))} / {_pct(r.get('no_call_rate'))}"

            def both(name: str, mixed=mixed) -> str:
                return f"{_pct(mixed['success'].get(name))} / {_pct(mixed['progress'].get(name))}"

            lines.append(
                f"| {row['epoch']} | {row['greedy_overall']:.1f} | "
                + " | ".join(
                    f"{row['greedy'].get(c, float('nan')):.1f}"
                    for c in ("base", "long_context", "miss_func", "miss_param")
                )
                + f" | {leans('miss_func')} | {leans('miss_param')} | "
                f"{_pct(ab.get('all', {}).get('names_missing_rate'))} | "
                f"{both('miss_func')} | {both('miss_param')} | {both('all')} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-category", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--limit", type=int, default=128, help="greedy val tasks")
    parser.add_argument("--signal-tasks", type=int, default=32)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--plateau-points", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "plateau")
    args = parser.parse_args()
    key = f"{args.per_category or 'all'} tasks per category"
    args.out = args.out / key.split()[0]
    config = preset(args)
    began = time.perf_counter()
    metrics = train(args, config)
    record: dict[str, Any] = {
        "command": "benchmarks/warm_start_plateau.py "
        + (f"--per-category {args.per_category} " if args.per_category else "")
        + f"--epochs {args.epochs} --limit {args.limit}",
        "machine": machine(),
        "measured": time.strftime("%Y-%m-%d %H:%M"),
        "epochs": args.epochs,
        "sequences": int(metrics["episodes"]),
        "by_category": metrics["by_category"],
        "train_seconds": time.perf_counter() - began,
        "trained_tokens": metrics["trained_tokens"],
        "plateau_points": args.plateau_points,
        "settings": config.warm_start.model_dump(),
        "rows": [],
    }
    serving = ServerSettings(enable_lora=False, weight_roots=[args.out])
    with ModelServer.start(serving) as server:
        record["serving_dtype"] = server.dtype
        for epoch in range(1, args.epochs + 1):
            row = measure(epoch, server, config, args)
            record["rows"].append(row)
            record["plateau"] = plateau(record["rows"], args.plateau_points)
            write(key, record)
            print(json.dumps({k: row[k] for k in ("epoch", "greedy_overall", "greedy")}))


if __name__ == "__main__":
    main()
