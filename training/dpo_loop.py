"""The hard-negative algorithms' stages: `eto` and `coevolve-dpo` in the same loop.

* `eto`: the target's own failures of an iteration are the negatives; chosen = the
  task's expert trajectory (its reference solution replayed) or, without one, its best
  successful episode; one DPO round on (chosen, truncated failure) pairs.
* `coevolve-dpo`: a failure agent — a second LoRA adapter on the same server, under
  its own name, started as a copy of the (warm-started) target — rolls out the same
  tasks. It is trained first, by DPO over pairs of failures from both agents (higher
  partial progress preferred), then its failures are the target's hard negatives.

The stages reuse the loop's store, rollout runner, swap verification and report; the
rollout, diagnose and evolve stages run as for GRPO, so SEAL's interface evolution
combines with either algorithm.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from peft import get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file

from seal_graph import registry
from seal_graph.interface import BASE_INTERFACE, InterfaceVersion
from seal_graph.records import Episode
from seal_graph.rollouts import run_rollouts
from seal_graph.training.dpo import dpo_step, pair_rows
from seal_graph.training.loop import batch_run_id, default_probe, iteration_tasks, mean
from seal_graph.training.policy import Policy
from seal_graph.training.preferences import (
    PreferencePair,
    Trajectory,
    failure_pairs,
    from_episode,
    target_pairs,
)
from seal_graph.training.resources import LoopResources, console
from seal_graph.training.sft import expert_episode, task_tools
from seal_graph.training.weight_sync import Probe, WeightSync

FAILURE_NAME = "seal-failure-agent"
"""The name the failure agent is served under."""

NEAR_SUCCESS = 0.5
"""A negative with at least this partial progress counts as near-success."""


def failure_batch_id(resources: LoopResources, iteration: int) -> str:
    return f"{batch_run_id(resources, iteration)}/failure"


def _failure_dir(resources: LoopResources, version: int) -> Path:
    return resources.run_dir / "failure-adapters" / f"step-{version}"


def open_failure_agent(resources: LoopResources) -> None:
    """The failure agent's policy (at its latest saved version) and its weight sync."""
    policy = Policy(resources.policy.base_dir, resources.config.lora)
    saved = sorted(
        int(p.name.removeprefix("step-"))
        for p in (resources.run_dir / "failure-adapters").glob("step-*")
    )
    if saved:
        weights = load_file(str(_failure_dir(resources, saved[-1]) / "adapter_model.safetensors"))
        set_peft_model_state_dict(policy.model, weights)
        policy.version = saved[-1]
    resources.failure = policy
    endpoint = resources.endpoint.model_copy(update={"model": FAILURE_NAME})
    resources.failure_sync = WeightSync(endpoint, "lora", tolerance=resources.config.swap_tolerance)


def seed_failure_agent(resources: LoopResources) -> dict[str, Any]:
    """Start the failure agent as a copy of the target, and serve it."""
    assert resources.failure is not None
    set_peft_model_state_dict(
        resources.failure.model, get_peft_model_state_dict(resources.policy.model)
    )
    resources.failure.version += 1
    return swap_failure(resources)


def swap_failure(resources: LoopResources) -> dict[str, Any]:
    """Serve the failure agent's current adapter under its name, verified."""
    failure, sync = resources.failure, resources.failure_sync
    assert failure is not None and sync is not None
    probe = resources.probe or default_probe(resources)
    weights = failure.save_adapter(_failure_dir(resources, failure.version))
    expected = failure.completion_logprobs(probe.prompt_token_ids, probe.completion_token_ids)
    report = sync.swap(weights, f"failure-{failure.version}", probe, expected)
    if report.ok:
        resources.failure_served = failure.version
    else:
        console.print(f"[bold red]failure-agent swap failed[/]: {report.error}")
    return {"ok": report.ok, "seconds": report.seconds, "error": report.error}


def failure_rollout(
    resources: LoopResources, iteration: int, interface: InterfaceVersion
) -> dict[str, Any]:
    """The failure agent explores the iteration's tasks."""
    assert resources.failure is not None
    config = resources.config
    began = time.perf_counter()
    asyncio.run(
        run_rollouts(
            config.env,
            resources.failure_sync.endpoint,
            iteration_tasks(resources, iteration),
            store=resources.store,
            run_id=failure_batch_id(resources, iteration),
            samples=config.dpo.failure_group_size,
            concurrency=config.rollout.concurrency,
            temperature=config.rollout.temperature,
            max_tokens=config.rollout.max_tokens,
            step_limit=config.rollout.step_limit,
            interface=interface,
            policy_version=f"failure-{resources.failure_served}",
            checkpoint_path=resources.run_dir / "rollouts.checkpoints.sqlite",
            keep_episodes=False,
        )
    )
    episodes = resources.store.episodes(failure_batch_id(resources, iteration))
    failures = [e for e in episodes if not e.success]
    return {
        "episodes": len(episodes),
        "success": mean(e.success for e in episodes),
        "mean_failure_progress": mean(e.progress for e in failures),
        "seconds": time.perf_counter() - began,
    }


def chosen_trajectories(
    resources: LoopResources, episodes: list[Episode], system: dict[str, str | None]
) -> dict[str, Trajectory]:
    """Per task: its expert trajectory, else its best successful episode of the batch."""
    env = registry.get_environment(resources.config.env)
    chosen: dict[str, Trajectory] = {}
    for task_id in system:
        expert = asyncio.run(expert_episode(env, env.task(task_id)))
        if expert is not None:
            chosen[task_id] = from_episode(expert, system[task_id], "expert")
    for episode in episodes:
        if episode.success and episode.task_id not in chosen:
            chosen[episode.task_id] = from_episode(episode, system[episode.task_id], "success")
    return chosen


def train(resources: LoopResources, iteration: int) -> dict[str, Any]:
    """One DPO round for the failure agent (coevolve-dpo), then one for the target."""
    config = resources.config
    began = time.perf_counter()
    env = registry.get_environment(config.env)
    tasks = {t: env.task(t) for t in iteration_tasks(resources, iteration)}
    system = {t: BASE_INTERFACE.system_prompt(task.system_prompt) for t, task in tasks.items()}
    tools = {t: task_tools(env, task) for t, task in tasks.items()}
    target_episodes = resources.store.episodes(batch_run_id(resources, iteration))
    target_failures = [
        from_episode(e, system[e.task_id], "target") for e in target_episodes if not e.success
    ]
    beta = config.dpo.beta(iteration)
    metrics: dict[str, Any] = {}
    negatives = target_failures
    if config.algo == "coevolve-dpo":
        assert resources.failure is not None
        failure_episodes = resources.store.episodes(failure_batch_id(resources, iteration))
        negatives = [
            from_episode(e, system[e.task_id], "failure") for e in failure_episodes if not e.success
        ]
        pairs = failure_pairs(
            target_failures + negatives, config.dpo.failure_pairs_per_task, config.seed
        )
        stepped = _dpo_round(resources, resources.failure, pairs, tools, beta, "dpo-failure")
        if stepped["pairs"]:
            resources.failure.version += 1
            resources.failure.save_adapter(_failure_dir(resources, resources.failure.version))
        metrics["failure_agent"] = _dpo_summary(stepped)
    pairs = target_pairs(chosen_trajectories(resources, target_episodes, system), negatives)
    stepped = _dpo_round(resources, resources.policy, pairs, tools, beta, "dpo-target")
    if stepped["pairs"]:
        resources.policy.version += 1
        resources.policy.save_adapter(resources.adapter_dir(resources.policy.version))
        resources.probe = _probe(target_episodes) or resources.probe
    return {
        "stepped": bool(stepped["pairs"]),
        "algo": config.algo,
        "negatives": negative_statistics(negatives),
        "target": _dpo_summary(stepped),
        **metrics,
        "seconds": time.perf_counter() - began,
    }


def _dpo_round(
    resources: LoopResources,
    policy: Policy,
    pairs: list[PreferencePair],
    tools: dict[str, list[dict]],
    beta: float,
    name: str,
) -> dict[str, float]:
    """One DPO round of `policy` (target or failure agent) on `pairs`."""
    rows = pair_rows(policy.tokenizer, pairs, tools.__getitem__)
    config = resources.config
    return dpo_step(
        policy.model,
        policy.tokenizer,
        rows,
        config.dpo,
        beta,
        resources.run_dir / name,
        config.seed,
    )


def negative_statistics(negatives: list[Trajectory]) -> dict[str, float]:
    """How hard the negatives are: count, mean and best partial progress, near-success share."""
    scores = [n.score for n in negatives]
    return {
        "count": float(len(scores)),
        "mean_progress": mean(scores),
        "best_progress": max(scores, default=0.0),
        "near_success": mean(s >= NEAR_SUCCESS for s in scores),
    }


def _dpo_summary(metrics: dict[str, float]) -> dict[str, float]:
    keys = ("pairs", "beta", "train_loss", "reward_margin", "reward_accuracy", "seconds")
    return {k: metrics[k] for k in keys if k in metrics}


def _probe(episodes: list[Episode]) -> Probe | None:
    """A served call of the batch: its tokens identify the weights after the swap."""
    for episode in episodes:
        for call in episode.llm_calls:
            if call.completion_token_ids:
                return Probe(
                    prompt_token_ids=call.prompt_token_ids,
                    completion_token_ids=call.completion_token_ids,
                )
    return None
