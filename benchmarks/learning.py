"""Does the loop learn on CPU? Every method under one budget, several seeds, kv-calc.

    .venv/bin/python benchmarks/learning.py --quick            # 3 methods, 1 seed
    .venv/bin/python benchmarks/learning.py --seeds 0 1 2      # all 7 methods

One supervised warm start (the bundled model on kv-calc's expert trajectories) is merged
into a checkpoint that every method then starts from, so all methods get the same
starting point and the same budget: `--iterations` loop iterations of
`--tasks` x `--group` training episodes (one optimiser step or DPO round each). Each run
ends with greedy evaluations on kv-calc's `test` split and its out-of-distribution `ood`
split (four-turn chains of both operations). Writes `docs/results/learning.md` with the
table (mean ± std over seeds), learning curves and label prevalence (PNG), the command,
the config and the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from seal_graph import ModelServer, ServerSettings
from seal_graph.bundled_model import ensure_bundled_model
from seal_graph.evaluation import select_tasks
from seal_graph.registry import get_environment
from seal_graph.rollouts import run_rollouts
from seal_graph.store import TraceStore

ROOT = Path(__file__).resolve().parent.parent
METHODS: dict[str, dict[str, Any]] = {
    "vanilla-grpo": {"algo": "vanilla-grpo"},
    "seal": {"algo": "seal"},
    "seal-no-adaptation": {"algo": "seal", "ablation": {"adaptation": False}},
    "seal-no-reweighting": {"algo": "seal", "ablation": {"reweighting": False}},
    "seal-no-closed-loop": {"algo": "seal", "ablation": {"closed_loop": False}},
    "eto": {"algo": "eto"},
    "coevolve-dpo": {"algo": "coevolve-dpo"},
}
QUICK = ["vanilla-grpo", "seal", "eto"]
SPLITS = ("test", "ood")


def evaluate_model(model_dir: Path | None, limit: int, out: Path) -> dict[str, float]:
    """Greedy success on each split for a checkpoint (its own server)."""
    env = get_environment("kv-calc")
    store = TraceStore(out / "traces.sqlite")
    scores = {}
    with ModelServer.start(ServerSettings(model=str(model_dir) if model_dir else None)) as server:
        for split in SPLITS:
            tasks = [t.id for t in select_tasks(env, split, None, limit)]
            asyncio.run(
                run_rollouts(
                    env,
                    server.endpoint,
                    tasks,
                    store=store,
                    run_id=split,
                    temperature=0.0,
                    max_tokens=96,
                    step_limit=4,
                    mode="eval",
                    keep_episodes=False,
                )
            )
            episodes = store.episodes(split)
            scores[split] = sum(e.success for e in episodes) / len(episodes)
    return scores


def warm_start_checkpoint(steps: int, out: Path) -> Path:
    """The shared starting point: SFT on expert trajectories, merged into a checkpoint."""
    from seal_graph.training.config import load_config
    from seal_graph.training.policy import Policy
    from seal_graph.training.sft import expert_dataset, warm_start

    target = out / "warm-start-model"
    if (target / "config.json").exists():
        return target
    config = load_config(None, "cpu", warm_start={"steps": steps})
    policy = Policy(ensure_bundled_model(), config.lora)
    dataset = expert_dataset(get_environment("kv-calc"), config.warm_start)
    warm_start(policy.model, policy.tokenizer, dataset, config.warm_start, out / "sft")
    return policy.save_merged(target)


def train_run(method: str, seed: int, args: argparse.Namespace, model: Path) -> dict[str, Any]:
    from seal_graph.training.config import load_config
    from seal_graph.training.run import run_training

    out = args.out / f"{method}-s{seed}"
    config = load_config(
        None,
        "cpu",
        model=str(model),
        seed=seed,
        iterations=args.iterations,
        warm_start={"steps": 0},
        rollout={"tasks_per_iteration": args.tasks, "group_size": args.group},
        eval={
            "limit": args.eval_limit,
            "every": args.iterations,
            "baseline": False,
            "final_splits": ["ood"],
        },
        **METHODS[method],
    )
    began = time.perf_counter()
    result = run_training(config, out=out, resume=(out / "config.json").exists())
    history = result["history"]
    final = history[-1].get("evaluate", {})
    return {
        "method": method,
        "seed": seed,
        "test": final.get("success"),
        "ood": final.get("ood_success"),
        "train_success": [r.get("rollout", {}).get("train_success", 0.0) for r in history],
        "labels": [r.get("diagnose", {}).get("label_prevalence", {}) for r in history],
        "seconds": time.perf_counter() - began,
    }


def _mean_std(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.fmean(values):.1f} ± {100 * spread:.1f}"


def plots(runs: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for method in dict.fromkeys(r["method"] for r in runs):
        curves = [r["train_success"] for r in runs if r["method"] == method]
        mean = [statistics.fmean(c[i] for c in curves) for i in range(len(curves[0]))]
        ax.plot(range(1, len(mean) + 1), mean, "o-", label=method)
    ax.set(xlabel="iteration", ylabel="training success", title="Learning curves (kv-calc)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "learning_curves.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    prevalence: dict[str, list[float]] = {}
    for run in runs:
        if run["method"] == "seal":
            for labels in run["labels"][:1]:
                for label, value in labels.items():
                    prevalence.setdefault(label, []).append(value)
    names = sorted(prevalence)
    ax.bar(names, [statistics.fmean(prevalence[n]) for n in names])
    ax.set(ylabel="prevalence", title="Turn labels, SEAL, first iteration")
    ax.tick_params(axis="x", rotation=45, labelsize=7)
    fig.tight_layout()
    fig.savefig(out / "learning_labels.png", dpi=110)
    plt.close(fig)


def write_report(args: argparse.Namespace, base: dict, warm: dict, runs: list[dict]) -> Path:
    docs = ROOT / "docs/results"
    docs.mkdir(parents=True, exist_ok=True)
    plots(runs, docs)
    seeds = sorted({r["seed"] for r in runs})
    lines = [
        "# Learning on CPU: kv-calc, the bundled SmolLM2-135M",
        "",
        f"Command: `.venv/bin/python benchmarks/learning.py {args.command}` on "
        f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, 2 CPU cores, no GPU.",
        "",
        f"Budget per method and seed: {args.iterations} iterations x {args.tasks} tasks x "
        f"{args.group} samples (one optimiser step or DPO round per iteration), from one shared "
        f"warm start ({args.warm_start_steps} SFT steps, merged). Evaluation: greedy, base "
        f"interface, {args.eval_limit} tasks of `test` and of `ood` (four-turn chains of both "
        f"operations; training tasks use one). Seeds: {seeds}. Success in % (mean ± std).",
        "",
        "| method | test | ood | minutes per run |",
        "|---|---|---|---|",
        f"| base model | {100 * base['test']:.1f} | {100 * base['ood']:.1f} | — |",
        f"| warm start | {100 * warm['test']:.1f} | {100 * warm['ood']:.1f} | — |",
    ]
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method]
        minutes = statistics.fmean(r["seconds"] for r in mine) / 60
        lines.append(
            f"| {method} | {_mean_std([r['test'] for r in mine])} | "
            f"{_mean_std([r['ood'] for r in mine])} | {minutes:.1f} |"
        )
    lines += [
        "",
        "![learning curves](learning_curves.png) ![labels](learning_labels.png)",
        "",
        "Per run (method, seed, test, ood, training success per iteration):",
        "",
        "```json",
        *(
            json.dumps({k: r[k] for k in ("method", "seed", "test", "ood", "train_success")})
            for r in runs
        ),
        "```",
    ]
    path = docs / "learning.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"Only {QUICK}, one seed.")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--eval-limit", type=int, default=12)
    parser.add_argument("--warm-start-steps", type=int, default=24)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-learning"))
    args = parser.parse_args()
    args.command = " ".join(sys.argv[1:])
    if args.quick:
        args.methods, args.seeds = QUICK, args.seeds[:1]
    args.out.mkdir(parents=True, exist_ok=True)
    base = evaluate_model(None, args.eval_limit, args.out / "eval-base")
    print(json.dumps({"base": base}), flush=True)
    model = warm_start_checkpoint(args.warm_start_steps, args.out)
    warm = evaluate_model(model, args.eval_limit, args.out / "eval-warm-start")
    print(json.dumps({"warm_start": warm}), flush=True)
    runs = []
    for seed in args.seeds:
        for method in args.methods:
            run = train_run(method, seed, args, model)
            print(json.dumps({k: v for k, v in run.items() if k != "labels"}), flush=True)
            runs.append(run)
    print(f"wrote {write_report(args, base, warm, runs)}")


if __name__ == "__main__":
    main()
