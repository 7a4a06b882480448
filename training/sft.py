"""Expert trajectories and a supervised warm start (TRL's SFTTrainer).

For environments with reference solutions, the reference calls are executed in the
environment through the same message format the agent sees (tool schemas, tool-call
messages, tool results), one agent step per call and a short closing answer per turn.
Each assistant message becomes one prompt-completion example; the loss falls on the
completion only. The bundled 135M model never calls a tool on its own, so a short warm
start is what gives RL a non-zero reward to work with.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from langchain_core.utils.function_calling import convert_to_openai_tool
from trl import SFTConfig, SFTTrainer

from seal_graph.environment import Environment, Task
from seal_graph.records import Episode
from seal_graph.reference import replay_calls
from seal_graph.training.settings import WarmStartSettings


def release_mixed_precision(trainer: Any) -> None:
    """Undo accelerate's bf16 autocast wrapper on the model's forward after training.

    Under mixed precision accelerate replaces `model.forward` with an autocast version and
    leaves it there; the policy would then compute every later logprob in bf16 (swap
    probes then disagree with the fp32 server by ~0.1-0.2 nats per token, measured).
    """
    trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)


def use_bf16(precision: str) -> bool:
    if precision != "auto":
        return precision == "bf16"
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


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


async def expert_examples(env: Environment, tasks: list[Task]) -> list[dict[str, Any]]:
    """Prompt-completion examples from each task's replayed reference solution."""
    examples = []
    for task in tasks:
        episode = await expert_episode(env, task)
        if episode is None:
            continue
        tools = json.dumps(task_tools(env, task))
        for index, message in enumerate(episode.messages):
            if message["role"] == "assistant":
                examples.append(
                    {"prompt": episode.messages[:index], "completion": [message], "tools": tools}
                )
    return examples


def expert_dataset(env: Environment, settings: WarmStartSettings, seed: int = 0) -> Dataset:
    tasks = env.tasks(settings.split)
    if settings.tasks:
        tasks = random.Random(seed).sample(tasks, min(settings.tasks, len(tasks)))
    examples = asyncio.run(expert_examples(env, tasks))
    for example in examples:  # uniform columns for Arrow: tool calls always present
        for message in [*example["prompt"], *example["completion"]]:
            message.setdefault("tool_calls", None)
            message.setdefault("tool_call_id", None)
            message.setdefault("name", None)
    return Dataset.from_list(examples)


def warm_start(
    model: Any, tokenizer: Any, dataset: Dataset, settings: WarmStartSettings, output_dir: Path
) -> dict[str, float]:
    """`settings.steps` SFT steps on the expert examples; returns the trainer's metrics."""
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
        use_cpu=not torch.cuda.is_available(),
        bf16=use_bf16(settings.precision),
        completion_only_loss=True,
        disable_tqdm=False,
        seed=0,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    result = trainer.train()
    release_mixed_precision(trainer)
    metrics = {k: float(v) for k, v in result.metrics.items() if isinstance(v, int | float)}
    metrics.update(examples=float(len(dataset)), seconds=time.perf_counter() - began)
    return metrics
