"""The hard-negative algorithms' stages: `eto` and `coevolve-dpo` in the same loop.

* `eto`: the target's own failures of an iteration are the negatives; chosen = the
  task's expert trajectory (its reference solution replayed) or, without one, its best
  successful episode; one DPO round on (chosen, truncated failure) pairs.
* `coevolve-dpo`: a failure agent — a second LoRA adapter on the same server, under
  its own name, started as a copy of the (warm-started) target — rolls out the same
  tasks. It is trained first, by DPO over pairs of failures from both agents (higher
  partial progress preferred), then its failures are the target's hard negatives.

`HardNegativeDPO` is both, behind the loop's `Algorithm` interface: the rollout, diagnose
and evolve stages run as for GRPO, so SEAL's interface evolution combines with either.
Its checkpointed state says which failure-agent version exists and which is served.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from peft import get_peft_model_state_dict, set_peft_model_state_dict

from seal_graph import registry
from seal_graph.errors import ServerError
from seal_graph.evolution import Labelled
from seal_graph.interface import BASE_INTERFACE, InterfaceVersion
from seal_graph.records import Episode
from seal_graph.training.algorithms import Algorithm, TrainResult
from seal_graph.training.config import TrainConfig
from seal_graph.training.console import console
from seal_graph.training.dpo import dpo_step, pair_rows
from seal_graph.training.loop import batch_run_id, default_probe, iteration_tasks, mean, roll_out
from seal_graph.training.policy import Policy
from seal_graph.training.preferences import (
    PreferencePair,
    Trajectory,
    failure_pairs,
    from_episode,
    target_pairs,
)
from seal_graph.training.report import hard_negative_section
from seal_graph.training.resources import LoopRun
from seal_graph.training.sft import expert_episode, task_tools
from seal_graph.training.weight_sync import Probe, WeightSync, reference_probe

FAILURE_NAME = "seal-failure-agent"
"""The name the failure agent is served under."""

NEAR_SUCCESS = 0.5
"""A negative with at least this partial progress counts as near-success."""


def failure_batch_id(run: LoopRun, iteration: int) -> str:
    return f"{batch_run_id(run, iteration)}/failure"


def _failure_dir(run: LoopRun, version: int) -> Path:
    return run.run_dir / "failure-adapters" / f"step-{version}"


class HardNegativeDPO(Algorithm):
    """`eto` (the target's own failures as negatives) and `coevolve-dpo` (a served failure
    agent's failures too). State: `failure_version` (the failure agent's adapter
    versions saved) and `failure_served` (the one its server name answers with)."""

    def __init__(self, config: TrainConfig) -> None:
        super().__init__(config)
        self.failure: Policy | None = None
        self.failure_sync: WeightSync | None = None

    @property
    def coevolve(self) -> bool:
        return self.config.algo == "coevolve-dpo"

    def initial_state(self) -> dict[str, Any]:
        return {"failure_version": 0, "failure_served": 0} if self.coevolve else {}

    def open(self, run: LoopRun, state: dict[str, Any]) -> None:
        """coevolve-dpo: the failure agent at its checkpointed version, served."""
        if not self.coevolve:
            return
        self.failure = Policy(run.policy.base_dir, run.config.lora)
        version = state.get("failure_version", 0)
        if version > 0:
            self.failure.load_adapter(_failure_dir(run, version))
            self.failure.version = version
        endpoint = run.endpoint.model_copy(update={"model": FAILURE_NAME})
        # the header names the failure agent by its adapter name; the card is the policy's
        self.failure_sync = WeightSync(endpoint, "lora", run.sync.check, publish=False)
        served = self.swap_failure(run, None)
        if not served["ok"]:
            raise ServerError(f"could not serve the failure agent: {served['error']}")

    def after_warm_start(
        self, run: LoopRun, state: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """coevolve-dpo: start the failure agent as a copy of the target, and serve it."""
        if self.failure is None:
            return {}, {}
        set_peft_model_state_dict(self.failure.model, get_peft_model_state_dict(run.policy.model))
        self.failure.version += 1
        served = self.swap_failure(run, None)
        updates = {"failure_version": self.failure.version}
        if served["ok"]:
            updates["failure_served"] = self.failure.version
        return {"failure_agent_seeded": served["ok"]}, updates

    def swap_failure(self, run: LoopRun, probe: Probe | None) -> dict[str, Any]:
        """Serve the failure agent's current adapter under its name, verified."""
        failure, sync = self.failure, self.failure_sync
        assert failure is not None and sync is not None
        probe = reference_probe(probe or default_probe(run), failure, sync.check)
        weights = failure.save_adapter(_failure_dir(run, failure.version))
        report = sync.swap(
            weights, f"failure-{failure.version}", probe, failure.completion_logprobs
        )
        if not report.ok:
            console.print(f"[bold red]failure-agent swap failed[/]: {report.error}")
        return {"ok": report.ok, "seconds": report.seconds, "error": report.error}

    def swap(
        self, run: LoopRun, state: dict[str, Any], probe: Probe | None
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        if self.failure is None or self.failure.version == state.get("failure_served"):
            return None, {}
        result = self.swap_failure(run, probe)
        return result, {"failure_served": self.failure.version} if result["ok"] else {}

    def rollout(
        self, run: LoopRun, iteration: int, interface: InterfaceVersion, state: dict[str, Any]
    ) -> dict[str, Any]:
        """coevolve-dpo: the failure agent explores the iteration's tasks."""
        if self.failure is None or self.failure_sync is None:
            return {}
        began = time.perf_counter()
        settings = run.config.rollout.model_copy(
            update={"group_size": run.config.dpo.failure_group_size}
        )
        batch = failure_batch_id(run, iteration)
        roll_out(
            run,
            batch,
            iteration_tasks(run.config, iteration),
            settings,
            interface=interface,
            policy_version=f"failure-{state.get('failure_served')}",
            endpoint=self.failure_sync.endpoint,
        )
        episodes = run.store.episodes(batch)
        failures = [e for e in episodes if not e.success]
        result = {
            "episodes": len(episodes),
            "success": mean(e.success for e in episodes),
            "mean_failure_progress": mean(e.progress for e in failures),
            "seconds": time.perf_counter() - began,
        }
        console.print(
            f"[bold]iteration {iteration}[/] failure agent: success {result['success']:.0%}, "
            f"mean progress of its failures {result['mean_failure_progress']:.2f} "
            f"({result['seconds']:.1f} s)"
        )
        return {"failure_agent": result}

    def train(
        self, run: LoopRun, iteration: int, pairs: Labelled, state: dict[str, Any]
    ) -> TrainResult:
        """One DPO round for the failure agent (coevolve-dpo), then one for the target."""
        config = run.config
        env = registry.get_environment(config.env)
        tasks = {t: env.task(t) for t in iteration_tasks(run.config, iteration)}
        system = {t: BASE_INTERFACE.system_prompt(task.system_prompt) for t, task in tasks.items()}
        tools = {t: task_tools(env, task) for t, task in tasks.items()}
        target_episodes = run.store.episodes(batch_run_id(run, iteration))
        target_failures = [
            from_episode(e, system[e.task_id], "target") for e in target_episodes if not e.success
        ]
        beta = config.dpo.beta(iteration)
        metrics: dict[str, Any] = {}
        updates: dict[str, Any] = {}
        negatives = target_failures
        if self.failure is not None:
            failure_episodes = run.store.episodes(failure_batch_id(run, iteration))
            negatives = [
                from_episode(e, system[e.task_id], "failure")
                for e in failure_episodes
                if not e.success
            ]
            pairs_f = failure_pairs(
                target_failures + negatives, config.dpo.failure_pairs_per_task, config.seed
            )
            stepped = _dpo_round(run, self.failure, pairs_f, tools, beta, "dpo-failure")
            if stepped["pairs"]:
                self.failure.version += 1
                self.failure.save_adapter(_failure_dir(run, self.failure.version))
                updates["failure_version"] = self.failure.version
            metrics["failure_agent"] = _dpo_summary(stepped)
        chosen = chosen_trajectories(run, target_episodes, system)
        stepped = _dpo_round(
            run, run.policy, target_pairs(chosen, negatives), tools, beta, "dpo-target"
        )
        probe = None
        if stepped["pairs"]:
            run.policy.version += 1
            run.policy.save_adapter(run.adapter_dir(run.policy.version))
            probe = _probe(target_episodes)
        return TrainResult(
            metrics={
                "stepped": bool(stepped["pairs"]),
                "algo": config.algo,
                "negatives": negative_statistics(negatives),
                "target": _dpo_summary(stepped),
                **metrics,
            },
            stepped=bool(stepped["pairs"]),
            probe=probe,
            state=updates,
        )

    def report_sections(self, history: list[dict[str, Any]]) -> list[str]:
        return hard_negative_section(history)

    def restore_served_weights(self) -> None:
        if self.failure_sync is not None:
            self.failure_sync.restore()

    def close(self) -> None:
        if self.failure_sync is not None:
            self.failure_sync.close()


def chosen_trajectories(
    run: LoopRun, episodes: list[Episode], system: dict[str, str | None]
) -> dict[str, Trajectory]:
    """Per task: its expert trajectory (unless `dpo.expert_chosen` is off), else its
    best successful episode of the batch."""
    env = registry.get_environment(run.config.env)
    chosen: dict[str, Trajectory] = {}
    for task_id in system if run.config.dpo.expert_chosen else ():
        expert = asyncio.run(expert_episode(env, env.task(task_id)))
        if expert is not None:
            chosen[task_id] = from_episode(expert, system[task_id], "expert")
    for episode in episodes:
        if episode.success and episode.task_id not in chosen:
            chosen[episode.task_id] = from_episode(episode, system[episode.task_id], "success")
    return chosen


def _dpo_round(
    run: LoopRun,
    policy: Policy,
    pairs: list[PreferencePair],
    tools: dict[str, list[dict]],
    beta: float,
    name: str,
) -> dict[str, float]:
    """One DPO round of `policy` (target or failure agent) on `pairs`."""
    rows = pair_rows(policy.tokenizer, pairs, tools.__getitem__)
    config = run.config
    return dpo_step(
        policy.model, policy.tokenizer, rows, config.dpo, beta, run.run_dir / name, config.seed
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


def _dpo_summary(metrics: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "pairs", "optimizer_steps", "beta", "train_loss", "reward_margin",
        "reward_accuracy", "seconds", "peak_rss_mb", "gradient_checkpointing",
        "trained_tokens", "expert_tasks",
    )  # fmt: skip
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
