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
import asyncio
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

from machine import cpu_of, machine, machine_of  # benchmarks/machine.py

from seal_graph import ModelServer, ServerSettings
from seal_graph.evaluation import outcomes, select_tasks
from seal_graph.labels import SUCCESS_LABELS, UNTRUSTED_LABELS
from seal_graph.registry import get_environment
from seal_graph.rollouts import run_rollouts
from seal_graph.settings import RolloutSettings
from seal_graph.stats import seeds_and_tasks_ci
from seal_graph.store import TraceStore

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs/results/learning"
ADAPTER = RESULTS / "warm-start-adapter"
METHODS: dict[str, dict[str, Any]] = {
    "vanilla-grpo": {"algo": "vanilla-grpo"},
    "seal": {"algo": "seal", "weighting": {"mode": "trajectory"}},
    "seal-turn": {"algo": "seal", "weighting": {"mode": "turn"}},
    "coevolve-dpo": {"algo": "coevolve-dpo"},
    # hard negatives + the failure agent, with SEAL's diagnosis-driven interface
    # evolution (DPO has no advantages, so diagnosis weights have nothing to scale)
    "seal-coevolve-dpo": {"algo": "coevolve-dpo", "ablation": {"adaptation": True}},
}
EXTRA_METHODS: dict[str, dict[str, Any]] = {
    "eto": {"algo": "eto"},
    "seal-no-adaptation": {"algo": "seal", "ablation": {"adaptation": False}},
    "seal-no-reweighting": {"algo": "seal", "ablation": {"reweighting": False}},
}
BASELINE = "vanilla-grpo"
SERVE_DTYPE = "float32"
"""What every server of a new benchmark serves in; a resumed one keeps what its warm start
recorded. Not bfloat16 even where the CPU has its kernels: an AVX2-only machine cannot
serve it, and bf16 greedy decoding flips near-ties, so runs served in the two differ."""


SETTINGS = Path(__file__).with_name("learning.toml")
"""Every run's settings: the `cpu` preset as the finished runs took it, pinned here so that
tuning the preset does not change the runs still to come."""


def benchmark_config(**overrides: Any) -> Any:
    from seal_graph.training.config import load_config

    return load_config(SETTINGS, None, **overrides)


def evaluate_checkpoint(
    model_dir: Path, samples: int, temperature: float, work: Path, dtype: str
) -> dict[str, Any]:
    """The warm start's evaluation, as a run's final one: greedy and sampled (at the
    rollout temperature) on all `test` tasks, greedy on all `ood` tasks, the base
    interface, the preset's limits. An interrupted evaluation of the same weights continues
    (its stored episodes are kept); one of other weights starts over."""
    stamp, digest = work / "model.sha256", fingerprint(model_dir)
    if not stamp.is_file() or stamp.read_text() != digest:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        stamp.write_text(digest)
    config = benchmark_config()
    greedy = config.rollout.greedy(config.eval.max_tokens)
    sampled = greedy.model_copy(update={"temperature": temperature, "group_size": samples})
    store = TraceStore(work / "traces.sqlite")
    env = get_environment("kv-calc")
    result: dict[str, Any] = {}
    serving = ServerSettings(model=str(model_dir), enable_lora=False, dtype=dtype)
    with ModelServer.start(serving) as server:
        for name, split, settings in (
            ("test", "test", greedy),
            ("test-sampled", "test", sampled),
            ("ood", "ood", greedy),
        ):
            tasks = [t.id for t in select_tasks(env, split, None, None)]
            asyncio.run(rollouts(server, tasks, store, name, settings))
            result[name] = outcomes(store.episodes(name))
    store.close()
    test, ood = result["test"], result["ood"]
    return {
        "test": {
            **test,
            "sampled_success": result["test-sampled"]["success"],
            "sampled_ci": result["test-sampled"]["ci"],
            "sampled_per_task": result["test-sampled"]["per_task"],
        },
        "ood": ood,
    }


async def rollouts(
    server: ModelServer,
    tasks: list[str],
    store: TraceStore,
    run_id: str,
    settings: RolloutSettings,
    mode: Literal["train", "eval"] = "eval",
) -> None:
    await run_rollouts(
        "kv-calc", server.endpoint, tasks, store=store, run_id=run_id, settings=settings,
        mode=mode, keep_episodes=False,
    )  # fmt: skip


def train_warm_start(
    target: Path,
    work: Path,
    steps: int | None = None,
    adapter: Path = ADAPTER,
    config: Any = None,
) -> dict[str, Any]:
    """SFT of the bundled model on kv-calc's expert episodes (the benchmark's pinned warm
    start, `config`'s, or `steps` of it), merged into `target`; the adapter is kept in the
    repository (`ADAPTER`, ~20 MB): SFT on CPU is not bitwise reproducible, so a later
    session (a fresh checkout has no runs/) rebuilds the very checkpoint the finished runs
    started from by merging it again."""
    from seal_graph.bundled_model import ensure_bundled_model
    from seal_graph.training.policy import Policy
    from seal_graph.training.sft import expert_dataset
    from seal_graph.training.sft import warm_start as sft

    if config is None:
        config = benchmark_config(warm_start=warm_start_settings(steps))
    policy = Policy(ensure_bundled_model(), config.lora)
    dataset, _ = expert_dataset(get_environment("kv-calc"), config.warm_start, policy.tokenizer)
    metrics = sft(policy.model, policy.tokenizer, dataset, config.warm_start, work)
    policy.save_adapter(adapter)
    policy.save_merged(target)
    return metrics


def merge_adapter(base_dir: Path, adapter: Path, target: Path) -> Path:
    """`base_dir` with a PEFT adapter merged in (float32), saved with its tokenizer."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype="float32")
    PeftModel.from_pretrained(base, adapter).merge_and_unload().save_pretrained(target)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(target)
    return target


def merge_warm_start(target: Path) -> None:
    """The shared checkpoint again: the bundled model with the kept adapter merged in."""
    from seal_graph.bundled_model import ensure_bundled_model

    merge_adapter(ensure_bundled_model(), ADAPTER, target)


def fingerprint(folder: Path) -> str:
    """sha256 over a folder's weight files."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.safetensors")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def warm_start(args: argparse.Namespace) -> dict[str, Any]:
    """The shared starting point (SFT on expert episodes, merged) and its evaluation."""
    target = args.out / "warm-start-model"
    began = time.perf_counter()
    metrics = train_warm_start(target, args.out / "sft", steps=args.warm_steps)
    temperature = run_config(BASELINE, 0, args).rollout.temperature
    evaluation = evaluate_checkpoint(
        target, args.eval_samples, temperature, args.out / "eval-warm-start", args.dtype
    )
    return {
        "method": "warm-start",
        **evaluation,
        "sft": metrics,
        "settings": warm_start_settings(args.warm_steps),
        "adapter_sha256": fingerprint(ADAPTER),
        "serving_dtype": args.dtype,
        "machine": machine(args.dtype),
        "minutes": (time.perf_counter() - began) / 60,
    }


def restore_warm_start(args: argparse.Namespace, warm: dict[str, Any]) -> None:
    """Rebuild the shared checkpoint of the finished runs from the kept adapter."""
    kept = fingerprint(ADAPTER) if ADAPTER.is_dir() else None
    if kept is None or kept != warm.get("adapter_sha256"):
        sys.exit(
            f"the warm start the finished runs in {RESULTS} began from cannot be rebuilt: "
            f"{ADAPTER} is missing or not the adapter warm-start.json names. Move "
            f"{RESULTS} away to start the benchmark over."
        )
    print(f"merging the kept warm-start adapter into {args.out / 'warm-start-model'}")
    merge_warm_start(args.out / "warm-start-model")


def warm_start_settings(steps: int | None) -> dict[str, Any]:
    """The warm start's SFT settings: the pinned ones, with `steps` steps if given."""
    return benchmark_config(warm_start={"steps": steps} if steps else {}).warm_start.model_dump()


def run_config(method: str, seed: int, args: argparse.Namespace) -> Any:
    spec = {**METHODS, **EXTRA_METHODS}[method]
    temperature = {"temperature": args.temperature} if args.temperature is not None else {}
    config = benchmark_config(
        model=str(args.out / "warm-start-model"),
        seed=seed,
        iterations=args.iterations,
        warm_start={"steps": 0},
        server_dtype=args.dtype,
        rollout={"tasks_per_iteration": args.tasks, "group_size": args.group, **temperature},
        optim={"max_samples": None, "mini_batches": args.mini_batches},
        # as many optimiser steps per DPO round as GRPO takes per iteration: one budget
        dpo={
            "epochs": 1,
            "batch_pairs": -(-args.pairs // args.mini_batches),
            "max_pairs": args.pairs,
        },
        eval={
            "limit": None,
            "every": args.iterations,
            "baseline": False,
            "samples": args.eval_samples,
            "final_splits": ["ood"],
        },
        # full-weight swaps keep the server at base speed; coevolve-dpo (two agents on one
        # server) swaps LoRA adapters, and refuses a `swap` set against that
        swap=None if spec["algo"] == "coevolve-dpo" else "full",
        **spec,
    )
    config.eval.final = config.swap == "full"  # else `final_evaluation` evaluates it
    return config


def _signal(point: dict) -> str:
    """What an iteration trained on: GRPO groups without signal of all groups, or the DPO
    round."""
    if point.get("dpo_pairs") is None:
        return f"{point['zero_signal_groups']}/{point['groups']}"
    margin = point["dpo_margin"]
    after = "no step" if margin is None else f"margin {margin:.2f}"
    return f"{point['dpo_pairs']:.0f} pairs, {after}"


def dpo_point(round_: Any) -> dict[str, float | None]:
    """A DPO round's pairs and reward margin after it, for the curve; nothing for GRPO."""
    if round_ is None:
        return {}
    return {"dpo_pairs": round_.pairs, "dpo_margin": round_.reward_margin}


def final_evaluation(run_dir: Path, version: int, config: Any, args: argparse.Namespace) -> dict:
    """A LoRA-served run's final policy (adapter `version`) merged into the warm start and
    evaluated as the warm start was, on a float32 server without LoRA."""
    model = args.out / "warm-start-model"
    if version > 0:
        adapter = run_dir / "adapters" / f"step-{version}"
        model = merge_adapter(model, adapter, run_dir / "final-model")
    temperature = config.rollout.temperature
    result = evaluate_checkpoint(
        model, args.eval_samples, temperature, run_dir / "eval-final", args.dtype
    )
    shutil.rmtree(run_dir / "final-model", ignore_errors=True)  # model-sized; rebuilt if asked
    return result


def train_run(method: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One method, one seed: the loop from the warm start, then its final evaluation."""
    from seal_graph.training.compute import use_bf16
    from seal_graph.training.metrics import SplitResult, history_of
    from seal_graph.training.report import STAGES
    from seal_graph.training.run import run_training

    out = args.out / f"{method}-s{seed}"
    began = time.perf_counter()
    resume = (out / "config.json").exists()  # an interrupted run continues
    config = run_config(method, seed, args)
    result = run_training(config, out=out, resume=resume)
    history = history_of(result["history"])
    final = history[-1].evaluate
    evaluated = time.perf_counter()
    if final is None:  # served with LoRA: evaluated merged (`run_config`)
        evaluation = final_evaluation(out, history[-1].policy_version, config, args)
        test, ood = (SplitResult.model_validate(evaluation[k]) for k in ("test", "ood"))
    else:
        test, ood = final, final.splits["ood"]
    final_seconds = time.perf_counter() - evaluated  # ~0 where the loop evaluated it
    staged = sum(r.stage_seconds(s) for r in history for s in STAGES)
    trains = [r.train.model_dump() for r in history]
    forwarded = sum(t.get("forwarded_tokens", 0.0) for t in trains)
    episodes = sum(t.get("episodes", 0.0) for t in trains)
    own = sum(t.get("episode_tokens", 0.0) for t in trains)
    return {
        "method": method,
        "seed": seed,
        "test": test.model_dump(exclude={"splits", "seconds"}),
        "ood": ood.model_dump(exclude={"seconds"}),
        "curve": [
            {
                "iteration": r.iteration + 1,
                "train_success": r.rollout.train_success,
                "zero_signal_groups": r.train.zero_signal_groups,
                "groups": r.train.groups,
                "labels": r.diagnose.label_prevalence,
                "interface_version": r.interface_version,
                "mismatch_mean": r.train.model_dump().get("mismatch_mean"),
                **({"rho": r.train.rho} if r.train.rho else {}),
                **dpo_point(r.train.target),
            }
            for r in history
        ],
        "optimizer_steps": sum(optimizer_steps(t, config) for t in trains),
        "trained_episodes": episodes,
        "tokens_per_trained_episode": forwarded / episodes if episodes else None,
        "forwarded_per_episode_token": forwarded / own if own else None,
        # the training step's throughput in useful tokens (`throughput_lines`)
        "episode_tokens": own,
        "train_seconds": sum(r.stage_seconds("train") for r in history),
        "train_precision": "bf16" if use_bf16(config.optim.precision) else "fp32",
        **trainer_loop(trains),
        # the stages' own wall time: counts every iteration once even when the run was
        # interrupted and resumed (server start-ups, ~0.5-1.5 min, are not in it)
        "minutes": (staged + final_seconds) / 60,
        "process_minutes": (time.perf_counter() - began) / 60,
        "resumed": resume,  # its minutes lack the cut-off part of an interrupted stage
        "serving_dtype": args.dtype,
        "machine": machine(args.dtype),
    }


def schedule(methods: list[str], seeds: list[int]) -> list[tuple[str, int]]:
    """Seed by seed, every method: an interrupted benchmark has the whole comparison at
    as many seeds as possible."""
    return [(m, s) for s in seeds for m in methods]


def points(value: float) -> float:
    return round(100 * value, 1)


def interval(mean: float, ci: tuple[float, float]) -> dict[str, Any]:
    return {"mean": points(mean), "ci": [points(ci[0]), points(ci[1])]}


def differences(runs: list[dict], others: list[dict] | dict, key: str) -> list[dict]:
    """Per-task differences of each run to its paired other run (same seed) or to one
    fixed reference (the warm start)."""
    out = []
    for run in runs:
        other = (
            others
            if isinstance(others, dict)
            else next((o for o in others if o["seed"] == run["seed"]), None)
        )
        if other is None:
            continue
        mine, theirs = run_values(run, key), run_values(other, key)
        out.append({t: mine[t] - theirs[t] for t in mine.keys() & theirs.keys()})
    return out


def run_values(run: dict, key: str) -> dict[str, float]:
    split, field = {"test": ("test", "per_task"), "test_sampled": ("test", "sampled_per_task"),
                    "ood": ("ood", "per_task")}[key]  # fmt: skip
    return run[split][field]


def summary(runs: list[dict], warm: dict) -> dict[str, Any]:
    """learning.json: per method, mean and 95% interval (seeds and tasks resampled) of
    each score and of the paired differences to the warm start and to vanilla GRPO."""
    methods: dict[str, Any] = {}
    baseline = [r for r in runs if r["method"] == BASELINE]
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method]
        entry: dict[str, Any] = {"seeds": len(mine)}
        for key in ("test", "test_sampled", "ood"):
            entry[key] = interval(*seeds_and_tasks_ci([run_values(r, key) for r in mine]))
        entry["delta_warm_start"] = interval(*seeds_and_tasks_ci(differences(mine, warm, "test")))
        paired = differences(mine, baseline, "test")
        if method != BASELINE and paired:
            entry["delta_vanilla"] = interval(*seeds_and_tasks_ci(paired))
        entry["minutes_per_run"] = round(statistics.fmean(r["minutes"] for r in mine), 1)
        entry["resumed_runs"] = sum(bool(r.get("resumed")) for r in mine)
        tokens = [r["tokens_per_trained_episode"] for r in mine if r["tokens_per_trained_episode"]]
        entry["tokens_per_trained_episode"] = round(statistics.fmean(tokens)) if tokens else None
        entry["optimizer_steps_per_run"] = statistics.fmean(r["optimizer_steps"] for r in mine)
        methods[method] = entry
    warm_entry = {
        key: interval(*seeds_and_tasks_ci([run_values(warm, key)]))
        for key in ("test", "test_sampled", "ood")
    }
    return {"warm_start": warm_entry, "methods": methods}


def _cell(entry: dict | None) -> str:
    if not entry:
        return "—"
    return f"{entry['mean']:+.1f} [{entry['ci'][0]:+.1f}, {entry['ci'][1]:+.1f}]"


def _score(entry: dict) -> str:
    return f"{entry['mean']:.1f} [{entry['ci'][0]:.1f}, {entry['ci'][1]:.1f}]"


def plot_curves(runs: list[dict], path: Path) -> None:
    """Training success per iteration (mean over seeds) and SEAL's failure labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (curves, labels_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r["curve"] for r in runs if r["method"] == method]
        steps = min(len(c) for c in mine)
        mean = [statistics.fmean(c[i]["train_success"] for c in mine) for i in range(steps)]
        curves.plot(range(1, steps + 1), mean, "o-", label=method)
    curves.set(xlabel="iteration", ylabel="training success (mean over seeds)")
    curves.xaxis.get_major_locator().set_params(integer=True)
    curves.legend(fontsize=7)
    seal = [r["curve"] for r in runs if r["method"] == "seal"]
    names = sorted({n for c in seal for it in c for n in it["labels"]} - SUCCESS_LABELS)
    iterations = min((len(c) for c in seal), default=0)
    width = 0.8 / max(iterations, 1)
    for i in range(iterations):
        values = [statistics.fmean(c[i]["labels"].get(n, 0.0) for c in seal) for n in names]
        labels_ax.bar([j + (i - (iterations - 1) / 2) * width for j in range(len(names))],
                      values, width, label=f"iteration {i + 1}")  # fmt: skip
    labels_ax.set_xticks(range(len(names)), names, rotation=40, ha="right", fontsize=7)
    labels_ax.set(ylabel="share of labelled turns", title="SEAL: failure labels")
    labels_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def optimizer_steps(train: dict[str, Any], config: Any) -> float:
    """An iteration's optimiser steps: GRPO's, or the DPO target's (the failure agent's
    are its own model's); records older than DPO's count get it from the settings."""
    if train.get("optimizer_steps"):
        return train["optimizer_steps"]
    target = train.get("target") or {}
    if target.get("optimizer_steps") is not None or not target.get("pairs"):
        return target.get("optimizer_steps") or 0.0
    return -(-target["pairs"] // config.dpo.batch_pairs) * config.dpo.epochs


def trainer_loop(trains: list[dict[str, Any]]) -> dict[str, float]:
    """Where a GRPO run's step time goes: seconds inside TRL's optimisation loop (the
    rest of the stage is the no-grad behaviour pass and set-up), the real tokens it
    forwarded per second there, and the padding share of what it forwarded."""
    grpo = [t for t in trains if t.get("tokens_per_second")]
    forwarded = sum(t["forwarded_tokens"] for t in grpo)
    real = [t["forwarded_tokens"] * (1 - t["padding_share"]) for t in grpo]
    loop_seconds = sum(r / t["tokens_per_second"] for r, t in zip(real, grpo, strict=True))
    if not loop_seconds:
        return {}
    return {
        "trainer_loop_seconds": loop_seconds,
        "trainer_loop_tokens_per_second": sum(real) / loop_seconds,
        "padding_share": 1 - sum(real) / forwarded,
    }


def throughput_lines(warm: dict, runs: list[dict]) -> list[str]:
    """The GRPO step's and the warm start's useful tokens per second (episode tokens, no
    repeats, no padding; per second of the whole train stage, its no-grad behaviour pass
    and trainer set-up included) against this machine's training limit, where
    `benchmarks/performance.py --only limit` measured one.

    The verdict takes the step as the code takes it now: the runs that forwarded each row
    alone (no padding share), else the step replayed on a run's episodes
    (`performance.py --only step`) on the limit's machine. Runs made before that change
    forwarded their micro-batches padded together; they are shown apart. Only runs and a
    warm start made on the limit's CPU compare with it."""
    saved = RESULTS.parent / "performance.json"
    measured = load(saved) if saved.exists() else {}
    limit, replay = measured.get("limit"), measured.get("step")
    cpu = cpu_of(machine_of(limit["command"])) if limit else None
    steps = [
        r
        for r in runs
        if r.get("episode_tokens") and r.get("train_seconds") and cpu_of(r["machine"]) == cpu
    ]
    precision = steps[0].get("train_precision", "fp32") if steps else None
    if not steps or cpu_of(warm["machine"]) != cpu or precision not in limit["data"]:
        return ["- Useful training tokens per second: the training limit of the runs' CPU is "
                "not measured yet (`.venv/bin/python benchmarks/performance.py --only limit` "
                "on it)."]  # fmt: skip
    alone = [r for r in steps if not r.get("padding_share")]
    padded = [r for r in steps if r.get("padding_share")]
    sft = warm["sft"]["trained_tokens"] / warm["sft"]["seconds"]
    top = limit["data"][precision]["max"]
    if alone:
        grpo, source = useful_rate(alone), pooled(alone)
    elif replay and machine_of(replay["command"]) == machine_of(limit["command"]):
        data = replay["data"]
        grpo = data["useful_tokens_per_s"]
        source = f"{data['episodes']} episodes of {data['source']} replayed: `{replay['command']}`"
    else:
        grpo, source = useful_rate(padded), pooled(padded)
    ok = min(grpo, sft) >= 0.6 * top
    lines = [
        f"- Useful training tokens per second (episode tokens once, no padding, over the "
        f"whole step): GRPO step {grpo:.0f} ({source}), warm start {sft:.0f}; the limit, "
        f"LoRA forward+backward+AdamW in {precision}, is {top:.0f} tokens/s "
        f"(`{limit['command']}`): {grpo / top:.2f}x and {sft / top:.2f}x, target >= 0.6x: "
        f"{'**met**' if ok else '**missed**'}."
    ]
    if padded and (alone or replay):
        inside = sum(r["trainer_loop_seconds"] for r in padded)
        padding = statistics.fmean(r["padding_share"] for r in padded)
        before = useful_rate(padded)
        real = sum(r["trainer_loop_tokens_per_second"] * r["trainer_loop_seconds"] for r in padded)
        lines.append(
            f"- The {len(padded)} GRPO runs made before the step forwarded each row alone "
            f"took {before:.0f} useful tokens/s "
            f"({before / top:.2f}x): their micro-batches went through the "
            f"model padded together ({100 * padding:.0f}% "
            f"padding) and TRL's fused LM head projected every position, the first prompt's "
            f"too; TRL's optimisation loop was "
            f"{100 * inside / sum(r['train_seconds'] for r in padded):.0f}% of the step at "
            f"{real / inside:.0f} forwarded real tokens/s. The loss is the same either way "
            f"(`tests/test_grpo_minibatches.py`), so their learning compares with later runs'."
        )
    return lines


def pooled(runs: list[dict]) -> str:
    """Where a pooled step figure comes from, in words."""
    return "the one run's steps" if len(runs) == 1 else f"the {len(runs)} runs' steps pooled"


def useful_rate(runs: list[dict]) -> float:
    """Episode tokens per second of the runs' train stages, pooled."""
    return sum(r["episode_tokens"] for r in runs) / sum(r["train_seconds"] for r in runs)


def against_targets(table: dict, runs: list[dict], planned_seeds: int) -> list[str]:
    """The issue's numbers, each marked met or missed, and what the runs show about why."""
    seal, warm = table["methods"].get("seal"), table["warm_start"]
    if seal is None:
        return []

    def verdict(ok: bool) -> str:
        return "**met**" if ok else "**missed**"

    gain, over_vanilla = seal["delta_warm_start"], seal.get("delta_vanilla")
    ratios = [r["forwarded_per_episode_token"] for r in runs if r["forwarded_per_episode_token"]]
    groups = [c for r in runs for c in r["curve"] if c.get("groups")]
    silent = sum(c["zero_signal_groups"] for c in groups)
    total = sum(c["groups"] for c in groups)
    lines = [
        "",
        f"## Against the targets (SEAL = trajectory weights; {seal['seeds']} of "
        f"{planned_seeds} seeds)",
        "",
        f"- SEAL >= +15 points over the warm start on test (greedy), interval excluding 0: "
        f"{_cell(gain)}: {verdict(gain['mean'] >= 15 and gain['ci'][0] > 0)}.",
        f"- SEAL >= +5 points over vanilla GRPO at equal budget: {_cell(over_vanilla)}: "
        + (verdict(over_vanilla["mean"] >= 5) if over_vanilla else "not measured yet")
        + ".",
        f"- SEAL on `ood` above the warm start: {_score(seal['ood'])} vs "
        f"{_score(warm['ood'])}: {verdict(seal['ood']['mean'] > warm['ood']['mean'])}.",
    ]
    if ratios:
        lines.append(
            f"- Training tokens forwarded per token of the trained episodes <= 1.3: "
            f"{statistics.fmean(ratios):.2f} on average over {len(ratios)} runs "
            f"(largest {max(ratios):.2f}): {verdict(statistics.fmean(ratios) <= 1.3)}."
        )
    if total:
        lines.append(
            f"- What limits the signal: {silent} of {total} GRPO groups "
            f"({100 * silent / total:.0f}%) had one reward for all their episodes, so no "
            "gradient; training success at the rollout temperature averages "
            f"{100 * statistics.fmean(c['train_success'] for c in groups):.0f}% (per-run "
            "table below), against "
            f"{100 * statistics.fmean(r['test']['success'] for r in runs):.0f}% greedy "
            "test success after training."
        )
    lines += diagnosis_weights(runs)
    signal = RESULTS.parent / "grpo_signal.json"  # benchmarks/grpo_signal.py
    if signal.exists():
        rows = load(signal)["rows"]
        lines.append(
            "- Signal by warm start and temperature on training tasks "
            "([grpo_signal.md](grpo_signal.md)): "
            + "; ".join(
                f"{r['warm_steps'] or 'the kept warm start'}"
                f"{' SFT steps' if r['warm_steps'] else ''} at temperature "
                f"{r['temperature']}: {100 * r['success']:.0f}% success, "
                f"{100 * r['mixed_groups']:.0f}% mixed groups"
                for r in rows
            )
            + "."
        )
    return lines


def diagnosis_weights(runs: list[dict]) -> list[str]:
    """Where rho ended, per label the SEAL runs saw: how far the diagnosis could reweight
    an advantage (runs made before rho was recorded are left out)."""
    ended = [r for r in runs if r["curve"] and "rho" in r["curve"][-1]]
    if not ended:
        return []
    table = benchmark_config().weighting.rho
    seen = sorted({k for r in ended for c in r["curve"] for k in c["labels"]} - UNTRUSTED_LABELS)
    finals = {k: [r["curve"][-1]["rho"].get(k, 1.0) for r in ended] for k in seen}
    spread = max(abs(v - 1.0) for values in finals.values() for v in values)
    return [
        f"- How far SEAL's diagnosis reweighted ({len(ended)} runs that recorded rho: "
        + ", ".join(f"{r['method']} s{r['seed']}" for r in ended)
        + "): rho after the last iteration "
        + "; ".join(
            f"{k} {min(v):.2f}-{max(v):.2f} (from {table.get(k, 1.0):.1f})"
            for k, v in finals.items()
        )
        + f". Every weight stayed within {100 * spread:.0f}% of 1"
        + (
            ": the paper's rho table (written in BFCL's per-turn tags) gives kv-calc's "
            "labels 1.0 or does not name them (1.0 too), and only dynamic rho moves them. "
            "Here SEAL differs from vanilla GRPO by its interface evolution, hardly by its "
            "weights."
            if all(table.get(k, 1.0) == 1.0 for k in seen)
            else "."
        )
    ]


def machine_lines(warm: dict, runs: list[dict]) -> list[str]:
    """One bullet per machine the results were made on, naming its runs (minutes per run
    compare only within one machine)."""
    made_on: dict[str, list[str]] = {}
    for r in [warm, *runs]:
        name = "warm start" if r is warm else f"{r['method']} s{r['seed']}"
        made_on.setdefault(r["machine"], []).append(name)
    return [f"- {machine}: {', '.join(names)}" for machine, names in made_on.items()]


def write_report(args: argparse.Namespace, warm: dict, runs: list[dict]) -> list[Path]:
    """learning.json and learning.md from the result files; returns what was written."""
    docs = RESULTS.parent
    table = summary(runs, warm)
    (docs / "learning.json").write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    plot_curves(runs, docs / "learning_curves.png")
    config = run_config(runs[0]["method"], runs[0]["seed"], args)
    w = table["warm_start"]
    lines = [
        "# Learning on CPU: kv-calc, the bundled SmolLM2-135M",
        "",
        f"Rebuilt from `docs/results/learning/*.json` by `benchmarks/learning.py` on "
        f"{time.strftime('%Y-%m-%d %H:%M')}. {len(runs)} of "
        f"{len(args.methods) * len(args.seeds)} planned runs finished, on:",
        "",
        *machine_lines(warm, runs),
        "",
        f"Budget per run: {args.iterations} iterations of {args.tasks} tasks x {args.group} "
        f"episodes at temperature {config.rollout.temperature} from one shared warm start "
        f"({warm['settings']['steps']} SFT steps of {warm['settings']['batch_size']} expert "
        f"episodes); GRPO takes {args.mini_batches} optimiser "
        f"steps per iteration over all of its episodes (whole-episode sequences), DPO one "
        f"round of at most {args.pairs} pairs in as many optimiser steps. "
        f"Evaluation on the base interface: greedy and sampled ({args.eval_samples} "
        f"episode{'s' if args.eval_samples > 1 else ''} per task at temperature "
        f"{config.rollout.temperature}) on all {len(warm['test']['per_task'])} `test` "
        f"tasks, greedy on all {len(warm['ood']['per_task'])} `ood` tasks, each on a "
        "float32 server without LoRA (the run's own after full-weight swaps; for the runs "
        "that serve LoRA adapters, coevolve-dpo's, a fresh one serving the final adapter "
        "merged, as the warm start is evaluated). Points (0-100): "
        "mean [95% interval]; intervals resample seeds and tasks; differences are paired "
        "by task (and by seed for vanilla GRPO).",
        "",
        "| method | seeds | test (greedy) | test (sampled) | ood | vs warm start | "
        "vs vanilla GRPO | minutes per run | training tokens per trained episode |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| warm start | — | {_score(w['test'])} | {_score(w['test_sampled'])} | "
        f"{_score(w['ood'])} | — | — | {warm['minutes']:.1f} | — |",
    ]
    for method, m in table["methods"].items():
        lines.append(
            f"| {method} | {m['seeds']} | {_score(m['test'])} | {_score(m['test_sampled'])} | "
            f"{_score(m['ood'])} | {_cell(m['delta_warm_start'])} | "
            f"{_cell(m.get('delta_vanilla'))} | {m['minutes_per_run']}"
            f"{'*' if m.get('resumed_runs') else ''} | "
            f"{m['tokens_per_trained_episode'] or '— (DPO)'} |"
        )
    lines += [
        "",
        "Minutes per run are the loop stages' wall time (rollouts, training, swaps, "
        "evaluations; for a LoRA-served run also its merge and final evaluation, that "
        "server's start included; other server start-ups left out), so a run interrupted "
        "and resumed "
        "counts each iteration once; * marks a mean over runs of which some were "
        "interrupted and resumed, whose cut-off stage counts only its last attempt (low by "
        "up to that stage's length); minutes compare only between runs made on one "
        "machine (listed above). The shared warm start is the bundled model with the "
        "adapter kept in `docs/results/learning/warm-start-adapter/` merged in (CPU SFT "
        "is not bitwise reproducible; a fresh checkout rebuilds the checkpoint from it).",
        *([f"Warm start minutes: {warm['minutes_note']}."] if "minutes_note" in warm else []),
        *against_targets(table, runs, len(args.seeds)),
        *throughput_lines(warm, runs),
        "",
        "![training success per iteration; SEAL's failure labels](learning_curves.png)",
        "",
        "Per run and iteration: training success, then zero-signal groups (GRPO) or the "
        "target's DPO pairs and its reward margin after the round (DPO).",
        "",
        "| run | " + " | ".join(f"it {i + 1}" for i in range(args.iterations)) + " |",
        "|---|" + "---|" * args.iterations,
    ]
    for r in runs:
        cells = [f"{100 * c['train_success']:.0f}% ({_signal(c)})" for c in r["curve"]]
        lines.append(f"| {r['method']} s{r['seed']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Command: `{f'.venv/bin/python benchmarks/learning.py {args.command}'.strip()}`.",
        "",
        "Config of the first run:",
        "",
        "```json",
        config.model_dump_json(indent=2),
        "```",
    ]
    (docs / "learning.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [docs / "learning.json", docs / "learning.md", docs / "learning_curves.png"]


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


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


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
