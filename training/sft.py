"""Expert trajectories and a supervised warm start (TRL's SFTTrainer).

For environments with reference solutions, the reference calls are executed in the
environment through the same message format the agent sees (tool schemas, tool-call
messages, tool results), one agent step per call and a short closing answer per turn.
Each replayed episode is one training sequence (`rendered_trajectory`): the loss falls
on the assistant messages only, and the shared system prompt and history are forwarded
once per episode instead of once per agent step. Micro-batches group episodes of
similar length, so little compute goes to padding. The bundled 135M model never calls
a tool on its own, so a short warm start is what gives RL a non-zero reward to work
with.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

from datasets import Dataset
from langchain_core.utils.function_calling import convert_to_openai_tool
from trl import SFTConfig, SFTTrainer

from seal_graph.environment import Environment, Task
from seal_graph.records import Episode
from seal_graph.reference import replay_calls
from seal_graph.training.compute import release_mixed_precision, trainer_compute_args
from seal_graph.training.settings import WarmStartSettings
from seal_graph.training.trajectories import TokenTrajectory, rendered_trajectory


def task_tools(env: Environment, task: Task) -> list[dict[str, Any]]:
    """The task's tools as the base interface offers them (all turns' tools)."""
    session = env.open(task)
    try:
        return [convert_to_openai_tool(t) for t in session.tools(len(task.turns) - 1)]
    finally:
        session.close()


async def expert_episode(env: Environment, task: Task) -> Episode | None:
    """The task's reference solution replayed; None without one or if it fails."""
    if task.reference is None:
        return None
    episode, verdict = await replay_calls(env, task, task.reference, run_id="expert")
    return episode if verdict.success else None  # a failing reference teaches nothing


async def expert_trajectories(
    env: Environment, tasks: list[Task], tokenizer: Any
) -> list[TokenTrajectory]:
    """Each task's replayed reference solution as one agent-masked token sequence."""
    trajectories = []
    for task in tasks:
        episode = await expert_episode(env, task)
        if episode is None:
            continue
        first = next(i for i, m in enumerate(episode.messages) if m["role"] == "assistant")
        trajectories.append(
            rendered_trajectory(tokenizer, episode.messages, task_tools(env, task), first)
        )
    return trajectories


def expert_dataset(
    env: Environment, settings: WarmStartSettings, tokenizer: Any, seed: int = 0
) -> Dataset:
    """The warm start's rows: `input_ids` of a whole expert episode and `completion_mask`
    on its assistant tokens (TRL's pre-tokenized format with `completion_only_loss`)."""
    tasks = env.tasks(settings.split)
    if settings.tasks:
        tasks = random.Random(seed).sample(tasks, min(settings.tasks, len(tasks)))
    trajectories = asyncio.run(expert_trajectories(env, tasks, tokenizer))
    return Dataset.from_list(
        [{"input_ids": t.token_ids, "completion_mask": t.agent_mask} for t in trajectories]
    )


def warm_start(
    model: Any, tokenizer: Any, dataset: Dataset, settings: WarmStartSettings, output_dir: Path
) -> dict[str, float]:
    """`settings.steps` SFT steps on the expert episodes; returns the trainer's metrics,
    with the useful (non-padding) tokens trained on and their rate."""
    began = time.perf_counter()
    args = SFTConfig(
        output_dir=str(output_dir),
        max_steps=settings.steps,
        per_device_train_batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        lr_scheduler_type="constant",
        logging_steps=max(1, settings.steps // 8),
        report_to="none",
        save_strategy="no",
        **trainer_compute_args(settings.precision),
        completion_only_loss=True,
        train_sampling_strategy="group_by_length",
        disable_tqdm=False,
        seed=0,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    result = trainer.train()
    release_mixed_precision(trainer)
    metrics = {k: float(v) for k, v in result.metrics.items() if isinstance(v, int | float)}
    tokens = max((e.get("num_tokens", 0) for e in trainer.state.log_history), default=0)
    seconds = time.perf_counter() - began
    metrics.update(
        episodes=float(len(dataset)),
        trained_tokens=float(tokens),
        tokens_per_second=tokens / metrics.get("train_runtime", seconds),
        seconds=seconds,
    )
    return metrics
