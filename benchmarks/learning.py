"""Does the loop make the agent better? Every method from one warm start, several seeds.

    .venv/bin/python benchmarks/learning.py                         # 5 methods x 3 seeds
    .venv/bin/python benchmarks/learning.py --resume --commit       # continue, commit each run
    .venv/bin/python benchmarks/learning.py --report-only           # rebuild the report

One supervised warm start of the bundled model on kv-calc's expert trajectories (the
warm start of the `cpu` preset as pinned in `benchmarks/learning.toml`, at `--warm-steps`
SFT steps) is merged into a checkpoint that every run starts from, so all methods get the
same starting point and the same budget:
`--iterations` loop iterations of `--tasks` x `--group` training episodes, each followed
by `--mini-batches` optimiser steps (GRPO: over the iteration's episodes; DPO: one
round of `--pairs` pairs). Each run ends with greedy and sampled evaluations on all of
kv-calc's `test` tasks and a greedy one on its `ood` tasks (four-turn chains using both
operations; no training task does), on the base interface, on a float32 server without
LoRA: the run's own server where it swaps full weights (the GRPO runs), a fresh one
serving the final adapter merged where the run served LoRA adapters (coevolve-dpo's two
agents; an adapter decodes at about half the speed, and would be a different server).

Every finished piece is a JSON file under `docs/results/learning/` (the warm start's
evaluation, then one file per method and seed), written as soon as it finishes and, with
`--commit`, committed at once; `docs/results/learning.md` and `learning.json` are rebuilt
from those files after each run. `--resume` skips finished runs and continues an
interrupted one from its loop checkpoint, so the benchmark can run in parts. Every server
serves in float32 (`SERVE_DTYPE`), on any CPU: the sessions that run the parts do not
always get the same machine, and float32 is the dtype every CPU serves, so a part run on
another machine continues the same comparison.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from learning_report import (  # benchmarks/learning_report.py
    write_report,
)
from learning_runs import (
    ADAPTER,
    EXTRA_METHODS,
    METHODS,
    RESULTS,
    ROOT,
    SERVE_DTYPE,
    load,
    restore_warm_start,
    schedule,
    train_run,
    warm_start,
    warm_start_settings,
)


def commit(paths: list[Path], message: str) -> None:
    """Commit exactly these paths (other staged or unstaged work is left alone)."""
    relative = [str(p.relative_to(ROOT)) for p in paths]
    for attempt in range(5):  # another git command may hold the index lock for a moment
        subprocess.run(["git", "add", "--", *relative], cwd=ROOT, check=False)
        done = subprocess.run(
            ["git", "commit", "-q", "-m", message, "--", *relative], cwd=ROOT, check=False
        )
        if done.returncode == 0:
            return
        time.sleep(2 + 3 * attempt)
    print(f"could not commit {relative}: commit them by hand", file=sys.stderr)


def finished_runs(args: argparse.Namespace) -> list[dict[str, Any]]:
    files = [RESULTS / f"{m}-s{s}.json" for m, s in schedule(args.methods, args.seeds)]
    return [load(f) for f in files if f.exists()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    everything = [*METHODS, *EXTRA_METHODS]
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=everything)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=8, help="Training tasks per iteration.")
    parser.add_argument("--group", type=int, default=4, help="Episodes per task (GRPO group).")
    parser.add_argument(
        "--mini-batches", type=int, default=2, help="Optimiser steps per iteration (GRPO, DPO)."
    )
    parser.add_argument("--pairs", type=int, default=8, help="DPO pairs per round.")
    parser.add_argument(
        "--warm-steps", type=int, default=15, help="SFT steps of the shared warm start "
        "(the pinned settings' otherwise; 15 gave the most groups with mixed rewards "
        "in benchmarks/grpo_signal.py, and the most room above it).",
    )  # fmt: skip
    parser.add_argument(
        "--temperature", type=float, default=None,
        help="Rollout temperature (default: the pinned settings').",
    )  # fmt: skip
    parser.add_argument("--eval-samples", type=int, default=1, help="Sampled episodes per task.")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-learning"))
    parser.add_argument("--resume", action="store_true", help="Skip finished runs.")
    parser.add_argument("--commit", action="store_true", help="git-commit each result file.")
    parser.add_argument("--report-only", action="store_true", help="Rebuild the report only.")
    args = parser.parse_args()
    bookkeeping = ("--report-only", "--resume", "--commit")  # no bearing on the results
    args.command = " ".join(a for a in sys.argv[1:] if a not in bookkeeping)
    RESULTS.mkdir(parents=True, exist_ok=True)
    warm_file = RESULTS / "warm-start.json"
    args.dtype = load(warm_file)["serving_dtype"] if warm_file.exists() else SERVE_DTYPE
    if args.report_only:
        if not warm_file.exists() or not finished_runs(args):
            sys.exit(f"nothing finished under {RESULTS}: run the benchmark first")
        print("wrote", *write_report(args, load(warm_file), finished_runs(args)))
        return
    if not args.resume and any(RESULTS.glob("*.json")):
        sys.exit(
            f"{RESULTS} already holds results: add --resume to continue that benchmark, or "
            "move them away to start over"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    if not warm_file.exists():
        warm_file.write_text(json.dumps(warm_start(args), indent=2), encoding="utf-8")
        if args.commit:
            commit([warm_file, ADAPTER], "benchmarks/learning: the warm start and its adapter")
    warm = load(warm_file)
    asked = warm_start_settings(args.warm_steps)
    if warm["settings"] != asked:
        sys.exit(
            f"the finished runs in {RESULTS} began from a warm start of "
            f"{warm['settings']['steps']} SFT steps, not {asked['steps']}: "
            "resume with the same --warm-steps, or move them away to start over"
        )
    if not (args.out / "warm-start-model" / "config.json").exists():
        restore_warm_start(args, warm)
    print(json.dumps({"warm_start": {k: warm[k]["success"] for k in ("test", "ood")}}), flush=True)
    for method, seed in schedule(args.methods, args.seeds):
        path = RESULTS / f"{method}-s{seed}.json"
        if path.exists():
            continue
        run = train_run(method, seed, args)
        path.write_text(json.dumps(run, indent=2), encoding="utf-8")
        written = write_report(args, warm, finished_runs(args))
        print(json.dumps({k: run[k] for k in ("method", "seed", "minutes")}), flush=True)
        if args.commit:
            commit([path, *written], f"benchmarks/learning: {method} seed {seed}")


if __name__ == "__main__":
    main()
