"""The stages every training algorithm shares, as plain functions over the live run.

rollout batch → diagnose → evolve interface → (the algorithm trains) → swap → (every k
iterations) evaluate on the base interface. The loop graph (`graphs/train_loop.py`)
wires them, calls the algorithm (`training/algorithms.py`) for what differs, and
checkpoints between stages. Every rollout of the loop goes through `roll_out`.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import statistics
import time
from collections.abc import Callable
from typing import Any, Literal

from seal_graph import evolution, registry
from seal_graph.abstention import abstention_rates
from seal_graph.diagnosis import label_statistics
from seal_graph.errors import ServerError
from seal_graph.evolution import Labelled
from seal_graph.interface import BASE_INTERFACE, InterfaceVersion
from seal_graph.runners.evaluation import category, mixed_groups, outcomes, select_tasks
from seal_graph.runners.rollouts import RolloutBatchReport, run_rollouts
from seal_graph.serving import ModelEndpoint
from seal_graph.settings import RolloutSettings
from seal_graph.training.advantages import episode_reward, key_statistics
from seal_graph.training.config import TrainConfig
from seal_graph.training.console import console
from seal_graph.training.from_run import import_batch
from seal_graph.training.replicas import ReplicasSwap
from seal_graph.training.resources import LoopRun
from seal_graph.training.sft import expert_dataset
from seal_graph.training.warm_start_apart import WarmStartJob, warm_start_apart
from seal_graph.training.weight_sync import Probe, reference_probe


def batch_run_id(run: LoopRun, iteration: int) -> str:
    """The store's id of an iteration's rollouts, numbered from 1 as the console, the
    report and Studio number iterations (`iteration` is the loop's 0-based counter)."""
    return f"{run.run_id}/it{iteration + 1}"


BASELINE, WARM_START = -1, -2
"""`evaluate`'s iteration for the evaluation before training and the one after the warm
start."""


def eval_batch_id(run: LoopRun, iteration: int) -> str:
    """The store's id of an evaluation: `eval-baseline`, `eval-warm-start`, `eval-itN`."""
    names = {BASELINE: "baseline", WARM_START: "warm-start"}
    return f"{run.run_id}/eval-{names.get(iteration, f'it{iteration + 1}')}"


def iteration_tasks(config: TrainConfig, iteration: int) -> list[str]:
    """The iteration's training tasks: a seeded sample of the split (reproducible, so a
    baseline trained outside the loop can see the tasks a run of its seed trains on)."""
    env = registry.get_environment(config.env)
    ids = [t.id for t in env.tasks(config.rollout.split)]
    rng = random.Random(f"{config.seed}/{iteration}")
    return rng.sample(ids, min(config.rollout.tasks_per_iteration, len(ids)))


def roll_out(
    run: LoopRun,
    batch_id: str,
    task_ids: list[str],
    settings: RolloutSettings,
    *,
    policy_version: str,
    interface: InterfaceVersion | None = None,
    mode: Literal["train", "eval"] = "train",
    endpoint: ModelEndpoint | None = None,
) -> RolloutBatchReport:
    """A batch into the run's store, resumable from the run's rollout checkpoints; the
    policy's batches spread over every replica, once they agree on the version served."""
    if endpoint is None:
        run.replicas.agree()
    return asyncio.run(
        run_rollouts(
            run.config.env,
            endpoint or run.replicas.endpoints(),
            task_ids,
            store=run.store,
            run_id=batch_id,
            settings=settings,
            interface=interface,
            mode=mode,
            policy_version=policy_version,
            checkpoint_path=run.run_dir / "rollouts.checkpoints.sqlite",
            keep_episodes=False,
            agent=registry.agent_factory(run.config.agent) if run.config.agent else None,
        )
    )


def rollout(
    run: LoopRun, iteration: int, interface: InterfaceVersion, served_version: int
) -> dict[str, Any]:
    began = time.perf_counter()
    batch = batch_run_id(run, iteration)
    if run.config.from_run is not None:  # the batch someone already has
        env = registry.get_environment(run.config.env).name
        import_batch(run.config.from_run, run.store, batch, env)
        failures, in_flight = 0, None
    else:
        report = roll_out(
            run,
            batch,
            iteration_tasks(run.config, iteration),
            run.config.rollout,
            interface=interface,
            policy_version=f"step-{served_version}",
        )
        failures, in_flight = len(report.failures), round(report.mean_in_flight, 2)
    episodes = run.store.episodes(batch)
    category_of = category_lookup(run)
    return {
        "episodes": len(episodes),
        "train_success": mean(e.success for e in episodes),
        "train_reward": mean(e.reward for e in episodes),
        "mixed_groups": mixed_groups(
            episodes, category_of, lambda e: episode_reward(e, run.config.weighting.reward)
        ),
        "abstention": abstention_rates(episodes, category_of),
        "rollout_failures": failures,
        "requests_in_flight": in_flight,
        "seconds": time.perf_counter() - began,
    }


def category_lookup(run: LoopRun) -> Callable[[str], str]:
    """A task id's category in the run's environment."""
    env = registry.get_environment(run.config.env)
    return lambda task_id: category(env.task(task_id))


def diagnose(run: LoopRun, iteration: int) -> dict[str, Any]:
    """Label the iteration's batch (and the judge, if configured) and store the labels."""
    began = time.perf_counter()
    episodes = run.store.episodes(batch_run_id(run, iteration))
    judge = registry.judge_model(run.config.judge)
    environment = registry.get_environment(run.config.env)
    pairs = asyncio.run(
        evolution.diagnose(episodes, registry.task_of, judge, run.store, environment)
    )
    stats = label_statistics(pairs)
    return {
        "label_prevalence": {k: s.prevalence for k, s in stats.items()},
        "label_counts": {k: s.count for k, s in stats.items()},
        "tag_counts": {k: s.count for k, s in key_statistics(pairs).items()},
        "seconds": time.perf_counter() - began,
    }


def labelled_batch(run: LoopRun, iteration: int) -> Labelled:
    """The iteration's episodes with the labels `diagnose` stored."""
    batch = batch_run_id(run, iteration)
    labels = run.store.labels(batch)
    return [(e, labels.get(e.episode_id, [])) for e in run.store.episodes(batch)]


def evolve_interface(
    run: LoopRun, iteration: int, current: InterfaceVersion, pairs: Labelled
) -> tuple[InterfaceVersion, dict[str, Any]]:
    """The next interface (ablations: no adaptation; frozen after the first diagnosis)."""
    ablation = run.config.ablation
    if not ablation.adaptation:
        return BASE_INTERFACE, {"version": 0, "change": "adaptation off"}
    if not ablation.closed_loop and iteration > 0:
        return current, {"version": current.version, "change": "frozen (no closed loop)"}
    environment = registry.get_environment(run.config.env)
    proposed = evolution.propose(current, pairs, run.config.interface, environment)
    if proposed.version != current.version:
        run.store.save_interface(run.run_id, proposed)
    change = proposed.summary if proposed.version != current.version else "no change"
    return proposed, {"version": proposed.version, "change": change}


def default_probe(run: LoopRun) -> Probe:
    """A chat-formatted prompt from the environment and the policy's own greedy answer
    (before any batch exists to take a sampled completion from). Likely tokens: server
    and trainer kernels agree closely on them, so the check separates weights, not noise."""
    policy = run.policy
    env = registry.get_environment(run.config.env)
    task = env.tasks(run.config.rollout.split)[0]
    prompt = policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": task.turns[0]}], add_generation_prompt=True, tokenize=True
    )
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    return Probe(prompt_token_ids=prompt, completion_token_ids=policy.greedy(prompt, 12))


def sync_server(run: LoopRun, version: int) -> dict[str, Any]:
    """Bring the server to the policy's weights (at start, after a restart)."""
    if run.config.swap == "full" and version == 0:
        return {"ok": True, "seconds": 0.0, "note": "base weights already served"}
    return swap(run, version, probe=None)


def swap(run: LoopRun, version: int, probe: Probe | None) -> dict[str, Any]:
    """Serve policy `version` under the stable name on every replica, each verified
    against the trainer (`training/replicas.py`)."""
    probe = probe or default_probe(run)
    began = time.perf_counter()
    weights = run.weights_for(version)
    written = time.perf_counter() - began
    score = run.policy.completion_logprobs
    began = time.perf_counter()
    probe = reference_probe(probe, run.policy, run.sync.check)
    referenced = time.perf_counter() - began
    # what a stale swap would show: the weights served now, checked against the new policy
    changed = run.sync.gap(probe, score)[0] if run.sync.current else None
    swapped = run.replicas.swap(weights, f"step-{version}", probe, score)
    report = swapped.report
    if swapped.ok:
        _drop_superseded_merges(run)
    elif not report.rolled_back and run.sync.current is not None:
        raise ServerError(
            f"swap to step-{version} failed ({report.error}) and the server could not be "
            f"brought back to {run.sync.current}: what it serves now is unknown, so the run "
            f"stops here. Check the server, then rerun with --resume --out {run.run_dir}"
        )
    else:
        console.print(
            f"[bold red]swap to step-{version} failed[/]: {report.error} "
            f"({'rolled back' if report.rolled_back else 'not rolled back'})"
        )
    return {
        "ok": swapped.ok,
        "seconds": report.seconds,
        "load_seconds": report.load_seconds,
        "write_seconds": written,
        "reference_seconds": referenced,
        "max_logprob_diff": report.max_logprob_diff,
        "mean_logprob_diff": report.mean_logprob_diff,
        "probe_change": changed,
        "rolled_back": report.rolled_back,
        "error": report.error,
        **_replica_metrics(swapped),
    }


def _replica_metrics(swapped: ReplicasSwap) -> dict[str, Any]:
    """Per-replica outcomes, when the run has several."""
    if len(swapped.replicas) < 2:
        return {}
    return {
        "replicas_ok": sum(r.ok for r in swapped.replicas),
        "replicas": [r.model_dump(exclude_none=True) for r in swapped.replicas],
    }


def _drop_superseded_merges(run: LoopRun) -> None:
    """Merged checkpoints are model-sized: keep only the one the server now serves."""
    served = {r.sync.current for r in run.replicas.serving()}
    for merged in (run.run_dir / "merged").glob("step-*"):
        if merged not in served:
            shutil.rmtree(merged, ignore_errors=True)


def warm_start(run: LoopRun) -> dict[str, Any]:
    """Supervised epochs on expert trajectories, then serve the result (if configured)."""
    settings = run.config.warm_start
    began = time.perf_counter()
    env = registry.get_environment(run.config.env)
    dataset, experts = expert_dataset(env, settings, run.policy.tokenizer, seed=run.config.seed)
    console.print(f"[bold]warm start[/]: {experts.summary()}")
    if len(dataset) == 0:
        console.print(f"warm start skipped: {env.name} has no reference solutions to learn from")
        return {"skipped": True, "seconds": time.perf_counter() - began}
    adapter = run.adapter_dir(run.policy.version + 1)
    job = WarmStartJob(
        run.policy.base_dir, run.config.lora, dataset.to_list(), settings, run.run_dir, adapter
    )
    metrics = warm_start_apart(job)
    run.policy.version += 1
    run.policy.load_adapter(adapter)
    swapped = swap(run, run.policy.version, probe=None)
    return {
        "episodes": int(metrics["episodes"]),
        "epochs": settings.epochs,
        "optimizer_steps": int(metrics["optimizer_steps"]),
        "by_category": experts.by_category(),
        "dropped_references": {reason: len(ids) for reason, ids in experts.dropped.items()},
        "trained_tokens": int(metrics["trained_tokens"]),
        "tokens_per_second": metrics["tokens_per_second"],
        "loss": metrics.get("train_loss"),
        "swap_ok": swapped["ok"],
        "seconds": time.perf_counter() - began,
    }


def evaluate(
    run: LoopRun, iteration: int, served_version: int, split: str | None = None
) -> dict[str, Any]:
    """Greedy rollouts of the eval split (or `split`) on the base interface, and on the
    eval split sampled ones when `eval.samples` asks; success with its interval and
    per-task outcomes."""
    settings = run.config.eval
    env = registry.get_environment(run.config.env)
    task_ids = [t.id for t in select_tasks(env, split or settings.split, None, settings.limit)]
    began = time.perf_counter()
    batch = eval_batch_id(run, iteration) + (f"-{split}" if split else "")
    served = f"step-{served_version}"
    greedy = run.config.rollout.greedy(settings.max_tokens)
    if settings.concurrency:
        greedy = greedy.model_copy(update={"concurrency": settings.concurrency})
    roll_out(run, batch, task_ids, greedy, mode="eval", policy_version=served)
    result = outcomes(run.store.episodes(batch))
    result["abstention"] = abstention_rates(run.store.episodes(batch), category_lookup(run))
    if settings.samples and split is None:  # sampled success on the eval split only
        sampling = greedy.model_copy(
            update={"temperature": run.config.rollout.temperature, "group_size": settings.samples}
        )
        roll_out(run, f"{batch}-sampled", task_ids, sampling, mode="eval", policy_version=served)
        sampled = outcomes(run.store.episodes(f"{batch}-sampled"))
        result.update(
            sampled_success=sampled["success"],
            sampled_ci=sampled["ci"],
            sampled_per_task=sampled["per_task"],
        )
    return {**result, "seconds": time.perf_counter() - began}


def mean(values: Any) -> float:
    values = list(values)
    return float(statistics.fmean(values)) if values else 0.0
