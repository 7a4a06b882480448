"""The stages of one closed-loop iteration, as plain functions over the live resources.

rollout batch → diagnose → evolve interface → train (one optimiser step) → swap →
(every k iterations) evaluate on the base interface. The loop graph
(`graphs/train_loop.py`) wires them and checkpoints between them.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import statistics
import time
from typing import Any

from seal_graph import registry
from seal_graph.diagnosis import TurnDiagnosis, diagnose_batch, label_statistics, looks_like_error
from seal_graph.evaluation import select_tasks
from seal_graph.interface import BASE_INTERFACE, InterfaceVersion, evolve
from seal_graph.records import Episode
from seal_graph.rollouts import run_rollouts
from seal_graph.training.advantages import (
    WeightedAdvantages,
    key_statistics,
    update_rho,
    weighted_advantages,
)
from seal_graph.training.grpo import grpo_step
from seal_graph.training.launched_step import StepJob, load_result, run_job, write_job
from seal_graph.training.resources import LoopResources, console
from seal_graph.training.sft import expert_dataset
from seal_graph.training.sft import warm_start as sft_warm_start
from seal_graph.training.weight_sync import Probe


def batch_run_id(resources: LoopResources, iteration: int) -> str:
    return f"{resources.run_id}/it{iteration}"


def iteration_tasks(resources: LoopResources, iteration: int) -> list[str]:
    """The iteration's training tasks: a seeded sample of the split (reproducible)."""
    env = registry.get_environment(resources.config.env)
    ids = [t.id for t in env.tasks(resources.config.rollout.split)]
    rng = random.Random(f"{resources.config.seed}/{iteration}")
    return rng.sample(ids, min(resources.config.rollout.tasks_per_iteration, len(ids)))


def sync_server(resources: LoopResources, version: int) -> dict[str, Any]:
    """Bring the server to the policy's weights (at start, after a restart)."""
    if resources.config.swap == "full" and version == 0:
        return {"ok": True, "seconds": 0.0, "note": "base weights already served"}
    return swap(resources, version, probe=None)


def rollout(
    resources: LoopResources, iteration: int, interface: InterfaceVersion, served_version: int
) -> dict[str, Any]:
    rollout = resources.config.rollout
    began = time.perf_counter()
    report = asyncio.run(
        run_rollouts(
            resources.config.env,
            resources.endpoint,
            iteration_tasks(resources, iteration),
            store=resources.store,
            run_id=batch_run_id(resources, iteration),
            samples=rollout.group_size,
            concurrency=rollout.concurrency,
            temperature=rollout.temperature,
            max_tokens=rollout.max_tokens,
            step_limit=rollout.step_limit,
            interface=interface,
            policy_version=f"step-{served_version}",
            checkpoint_path=resources.run_dir / "rollouts.checkpoints.sqlite",
            keep_episodes=False,
        )
    )
    episodes = resources.store.episodes(batch_run_id(resources, iteration))
    return {
        "episodes": len(episodes),
        "train_success": mean(e.success for e in episodes),
        "train_reward": mean(e.reward for e in episodes),
        "rollout_failures": len(report.failures),
        "seconds": time.perf_counter() - began,
    }


def diagnose(resources: LoopResources, iteration: int) -> dict[str, Any]:
    """Label the iteration's batch and store the labels."""
    began = time.perf_counter()
    pairs = diagnose_batch(resources.store.episodes(batch_run_id(resources, iteration)))
    for episode, diagnoses in pairs:
        resources.store.write_labels(episode.episode_id, diagnoses)
    stats = label_statistics(pairs)
    return {
        "label_prevalence": {k: s.prevalence for k, s in stats.items()},
        "label_counts": {k: s.count for k, s in stats.items()},
        "seconds": time.perf_counter() - began,
    }


def labelled_batch(
    resources: LoopResources, iteration: int
) -> list[tuple[Episode, list[TurnDiagnosis]]]:
    """The iteration's episodes with the labels `diagnose` stored."""
    run_id = batch_run_id(resources, iteration)
    labels = resources.store.labels(run_id)
    return [(e, labels.get(e.episode_id, [])) for e in resources.store.episodes(run_id)]


def evolve_interface(
    resources: LoopResources,
    iteration: int,
    current: InterfaceVersion,
    pairs: list[tuple[Episode, list[TurnDiagnosis]]],
) -> tuple[InterfaceVersion, dict[str, Any]]:
    """The next interface (ablations: no adaptation; frozen after the first diagnosis)."""
    ablation = resources.config.ablation
    if not ablation.adaptation:
        return BASE_INTERFACE, {"version": 0, "change": "adaptation off"}
    if not ablation.closed_loop and iteration > 0:
        return current, {"version": current.version, "change": "frozen (no closed loop)"}
    errors = [e.output for episode, _ in pairs for e in episode.tool_events if looks_like_error(e)]
    proposed = evolve(current, label_statistics(pairs), errors, resources.config.interface)
    if proposed.version != current.version:
        resources.store.save_interface(resources.run_id, proposed)
    change = proposed.summary if proposed.version != current.version else "no change"
    return proposed, {"version": proposed.version, "change": change}


def train(
    resources: LoopResources,
    iteration: int,
    pairs: list[tuple[Episode, list[TurnDiagnosis]]],
    rho: dict[str, float],
) -> tuple[dict[str, float], dict[str, Any]]:
    """Advantages from the diagnoses, then one optimiser step; returns the next rho."""
    config = resources.config
    began = time.perf_counter()
    if config.weighting.dynamic_rho and config.ablation.reweighting:
        rho = update_rho(rho, key_statistics(pairs), config.weighting)
    weighted = weighted_advantages(pairs, config.weighting, rho)
    rows = training_rows(resources, iteration, weighted)
    if config.launcher is not None:
        metrics = launched_step(resources, rows)
    else:
        resources.trainer, metrics = grpo_step(
            resources.policy.model,
            resources.policy.tokenizer,
            rows,
            config.optim,
            resources.run_dir / "trainer",
            resources.trainer,
        )
    stepped = metrics.get("samples", 0.0) > 0
    if stepped:
        resources.policy.version += 1
        resources.policy.save_adapter(resources.adapter_dir(resources.policy.version))
        resources.probe = _probe(rows)
    advantages = [abs(a) for a in weighted.advantage.values()]
    return rho, {
        "stepped": stepped,
        "samples": int(metrics.get("samples", 0)),
        "loss": metrics.get("train_loss"),
        "groups": weighted.groups,
        "zero_signal_groups": weighted.zero_signal_groups,
        "mean_abs_advantage": mean(advantages),
        "mean_weight": mean(weighted.weight.values()),
        "weighting": config.weighting_mode,
        "seconds": time.perf_counter() - began,
    }


def launched_step(resources: LoopResources, rows: list[dict[str, Any]]) -> dict[str, float]:
    """The optimiser step in separate processes under the configured launcher."""
    config = resources.config
    job_dir = resources.run_dir / "launched-step"
    job = StepJob(base_dir=resources.policy.base_dir, lora=config.lora, optim=config.optim)
    write_job(job_dir, job, rows, resources.policy)
    console.print(f"training step under: {' '.join(config.launcher or [])}")
    metrics = run_job(job_dir, config.launcher or [], resources.run_dir / "launched-step.log")
    if metrics.get("samples", 0.0) > 0:
        load_result(job_dir, resources.policy)
    return metrics


def training_rows(
    resources: LoopResources, iteration: int, weighted: WeightedAdvantages
) -> list[dict[str, Any]]:
    """One row per stored LLM call with the advantage of its episode (and turn)."""
    mode = resources.config.weighting_mode
    return [
        {**sample, "advantage": weighted.for_call(sample["episode_id"], sample["turn"], mode)}
        for sample in resources.store.training_samples(batch_run_id(resources, iteration))
        if sample["completion_token_ids"]
    ]


def _probe(rows: list[dict[str, Any]]) -> Probe:
    row = max(rows, key=lambda r: abs(r["advantage"]))
    return Probe(
        prompt_token_ids=row["prompt_token_ids"], completion_token_ids=row["completion_token_ids"]
    )


def default_probe(resources: LoopResources) -> Probe:
    """A chat-formatted prompt from the environment and the policy's own greedy answer
    (before any batch exists to take a sampled completion from). Likely tokens: server
    and trainer kernels agree closely on them, so the check separates weights, not noise."""
    policy = resources.policy
    env = registry.get_environment(resources.config.env)
    task = env.tasks(resources.config.rollout.split)[0]
    prompt = policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": task.turns[0]}], add_generation_prompt=True, tokenize=True
    )
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    return Probe(prompt_token_ids=prompt, completion_token_ids=policy.greedy(prompt, 12))


def swap(resources: LoopResources, version: int, probe: Probe | None) -> dict[str, Any]:
    """Serve policy `version` under the stable name, verified against the trainer."""
    probe = probe or resources.probe or default_probe(resources)
    began = time.perf_counter()
    weights = resources.weights_for(version)
    expected = resources.policy.completion_logprobs(
        probe.prompt_token_ids, probe.completion_token_ids
    )
    before = resources.sync.served_logprobs(probe) if resources.sync.current else None
    report = resources.sync.swap(weights, f"step-{version}", probe, expected)
    changed = (
        None if before is None else max(abs(a - b) for a, b in zip(before, expected, strict=True))
    )
    if report.ok:
        _drop_superseded_merges(resources)
    else:
        console.print(
            f"[bold red]swap to step-{version} failed[/]: {report.error} "
            f"({'rolled back' if report.rolled_back else 'not rolled back'})"
        )
    return {
        "ok": report.ok,
        "seconds": report.seconds,
        "write_seconds": time.perf_counter() - began - report.seconds,
        "max_logprob_diff": report.max_logprob_diff,
        "probe_change": changed,
        "rolled_back": report.rolled_back,
        "error": report.error,
    }


def _drop_superseded_merges(resources: LoopResources) -> None:
    """Merged checkpoints are model-sized: keep only the one the server now serves."""
    for merged in (resources.run_dir / "merged").glob("step-*"):
        if merged != resources.sync.current:
            shutil.rmtree(merged, ignore_errors=True)


def warm_start(resources: LoopResources) -> dict[str, Any]:
    """Supervised steps on expert trajectories, then serve the result (if configured)."""
    settings = resources.config.warm_start
    began = time.perf_counter()
    env = registry.get_environment(resources.config.env)
    dataset = expert_dataset(env, settings, seed=resources.config.seed)
    if len(dataset) == 0:
        console.print(f"warm start skipped: {env.name} has no reference solutions to learn from")
        return {"skipped": True, "seconds": time.perf_counter() - began}
    metrics = sft_warm_start(
        resources.policy.model,
        resources.policy.tokenizer,
        dataset,
        settings,
        resources.run_dir / "sft",
    )
    resources.policy.version += 1
    resources.policy.save_adapter(resources.adapter_dir(resources.policy.version))
    swapped = swap(resources, resources.policy.version, probe=None)
    return {
        "examples": int(metrics["examples"]),
        "loss": metrics.get("train_loss"),
        "swap_ok": swapped["ok"],
        "seconds": time.perf_counter() - began,
    }


def evaluate(resources: LoopResources, iteration: int, split: str | None = None) -> dict[str, Any]:
    """Greedy rollouts of the eval split (or `split`) on the base interface."""
    settings = resources.config.eval
    env = registry.get_environment(resources.config.env)
    tasks = select_tasks(env, split or settings.split, None, settings.limit)
    began = time.perf_counter()
    run_id = f"{resources.run_id}/eval{iteration}" + (f"-{split}" if split else "")
    asyncio.run(
        run_rollouts(
            env,
            resources.endpoint,
            [t.id for t in tasks],
            store=resources.store,
            run_id=run_id,
            samples=1,
            concurrency=resources.config.rollout.concurrency,
            temperature=0.0,
            max_tokens=settings.max_tokens,
            step_limit=resources.config.rollout.step_limit,
            mode="eval",
            policy_version=f"step-{resources.policy.version}",
            checkpoint_path=resources.run_dir / "rollouts.checkpoints.sqlite",
            keep_episodes=False,
        )
    )
    episodes = resources.store.episodes(run_id)
    return {
        "success": mean(e.success for e in episodes),
        "episodes": len(episodes),
        "seconds": time.perf_counter() - began,
    }


def mean(values: Any) -> float:
    values = list(values)
    return float(statistics.fmean(values)) if values else 0.0
