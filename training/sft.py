"""Expert trajectories and a supervised warm start (TRL's SFTTrainer).

For environments with reference solutions, the reference calls are executed in the
environment through the same message format the agent sees (tool schemas, tool-call
messages, tool results), one agent step per call and the reference's closing reply per
turn (`Task.reference_replies`: an answer, or what an abstaining turn says; else
"Done."). A task whose reference is missing or fails its own verifier is dropped, and
the warm start says how many were and why.
Each replayed episode is one training sequence (`rendered_trajectory`): the loss falls
on the assistant messages only, and the shared system prompt and history are forwarded
once per episode instead of once per agent step. Each episode is forwarded alone, cut to
its own tokens, with the LM head from its first agent token on (`EpisodeSFTTrainer`).

The warm start trains whole epochs: every expert sequence once per epoch, in a fresh
random order each epoch. (It used to sample by length for a fixed number of steps,
which always took the longest sequences of a random block: the short `miss_func`
sequence holding the abstention was never trained, and the agent never learned to call
nothing.) `WarmStartSettings.tasks_per_category` takes a smaller reference set, the same
number of tasks from each category, where a full epoch is too slow.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from datasets import Dataset
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, Field
from trl import SFTConfig, SFTTrainer

from seal_graph.environment import Environment, Task
from seal_graph.records import Episode
from seal_graph.reference import replay_calls
from seal_graph.training.compute import release_mixed_precision, trainer_compute_args
from seal_graph.training.run_output import show_steps
from seal_graph.training.settings import WarmStartSettings
from seal_graph.training.trajectories import TokenTrajectory, rendered_trajectory


def turn_tools(env: Environment, task: Task) -> list[list[dict[str, Any]]]:
    """The tools the base interface offers at each turn of the task (a held-out tool
    appears from its turn on)."""
    session = env.open(task)
    try:
        return [
            [convert_to_openai_tool(t) for t in session.tools(turn)]
            for turn in range(len(task.turns))
        ]
    finally:
        session.close()


def task_tools(env: Environment, task: Task) -> list[dict[str, Any]]:
    """The task's tools as the base interface offers them at its last turn (all of them)."""
    return turn_tools(env, task)[-1]


NO_REFERENCE = "no reference solution"
FAILING_REFERENCE = "the reference fails the task's own verifier"


async def replayed_reference(env: Environment, task: Task) -> tuple[Episode | None, str | None]:
    """The task's reference solution replayed, or None and why it cannot teach."""
    if task.reference is None:
        return None, NO_REFERENCE
    episode, verdict = await replay_calls(env, task, task.reference, run_id="expert")
    return (episode, None) if verdict.success else (None, FAILING_REFERENCE)


async def expert_episode(env: Environment, task: Task) -> Episode | None:
    """The task's reference solution replayed; None without one or if it fails."""
    return (await replayed_reference(env, task))[0]


def expert_sequences(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[list[dict[str, Any]]]
) -> list[tuple[TokenTrajectory, range]]:
    """An expert episode as training sequences, each with the user turns it trains: one
    while the offered tools stay the same, so every agent message is trained in the
    prompt the agent sees at its turn (a held-out tool changes the prompt from its turn
    on). A sequence holds the whole history before it as context and trains only its own
    turns' agent messages."""
    user_at = [i for i, m in enumerate(messages) if m["role"] == "user"]
    sequences: list[tuple[TokenTrajectory, range]] = []
    start = 0
    for turn in range(len(user_at)):
        last = turn == len(user_at) - 1
        if not last and tools[turn + 1] == tools[turn]:
            continue
        end = len(messages) if last else user_at[turn + 1]
        first = next(i for i in range(user_at[start], end) if messages[i]["role"] == "assistant")
        trajectory = rendered_trajectory(tokenizer, messages[:end], tools[turn], first)
        sequences.append((trajectory, range(start, turn + 1)))
        start = turn + 1
    return sequences


class ExpertSource(BaseModel):
    """Where one expert sequence comes from, and what it teaches."""

    task_id: str
    category: str = Field(description="The task's `metadata['category']`, else `all`.")
    turns: int = Field(description="User turns whose agent messages it trains.")
    abstention_turns: int = Field(
        description="Of them, turns whose reference calls nothing (ask, or say no tool can)."
    )


class ExpertSet(BaseModel):
    """The warm start's expert sequences, and the tasks that gave none (and why)."""

    tasks: int = Field(description="Tasks whose references were replayed.")
    trajectories: list[TokenTrajectory] = Field(default_factory=list)
    sources: list[ExpertSource] = Field(
        default_factory=list, description="Per sequence (same order), where it comes from."
    )
    dropped: dict[str, list[str]] = Field(
        default_factory=dict, description="Reason -> ids of the tasks dropped for it."
    )

    def by_category(self) -> dict[str, dict[str, int]]:
        """Per category: sequences, and abstention turns they train (per epoch)."""
        counts: dict[str, dict[str, int]] = {}
        for source in self.sources:
            row = counts.setdefault(source.category, {"sequences": 0, "abstention_turns": 0})
            row["sequences"] += 1
            row["abstention_turns"] += source.abstention_turns
        return dict(sorted(counts.items()))

    def summary(self) -> str:
        """One line: how many tasks taught, how many were dropped and why."""
        kept = self.tasks - sum(len(ids) for ids in self.dropped.values())
        line = f"{kept} of {self.tasks} references replayed ({len(self.trajectories)} sequences)"
        abstentions = sum(source.abstention_turns for source in self.sources)
        if abstentions:
            line += f", {abstentions} abstention turns"
        for reason, ids in self.dropped.items():
            shown = ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")
            line += f"; dropped {len(ids)}: {reason} ({shown})"
        return line


async def expert_trajectories(env: Environment, tasks: list[Task], tokenizer: Any) -> ExpertSet:
    """Each task's replayed reference solution as agent-masked token sequences."""
    experts = ExpertSet(tasks=len(tasks))
    for task in tasks:
        episode, reason = await replayed_reference(env, task)
        if episode is None:
            experts.dropped.setdefault(reason or "?", []).append(task.id)
            continue
        category = str(task.metadata.get("category", "all"))
        for trajectory, turns in expert_sequences(
            tokenizer, episode.messages, turn_tools(env, task)
        ):
            experts.trajectories.append(trajectory)
            experts.sources.append(
                ExpertSource(
                    task_id=task.id,
                    category=category,
                    turns=len(turns),
                    abstention_turns=sum(not (task.reference or [])[t] for t in turns),
                )
            )
    return experts


class EpisodeSFTTrainer(SFTTrainer):
    """TRL's SFTTrainer with each episode of a micro-batch forwarded alone: cut to its
    own tokens (no padding) and projected through the LM head only from its first agent
    token on (`logits_to_keep`), where the loss can fall.

    TRL's own loss runs a fused LM head that, off a GPU, scores every position of the
    padded batch in tiles and recomputes them in the backward pass; for the bundled model
    that was ~40% of a warm-start step (torch profiler, AVX512-BF16 EPYC). The README's
    main command's warm start trained 113 tokens/s with it and 196-212 with this, against
    a bf16 limit of 250 there (`benchmarks/performance.py --only main limit`). The loss is
    TRL's: the summed negative log-likelihood of the agent tokens over
    `num_items_in_batch`. TRL's entropy and token-accuracy statistics are not logged."""

    #: Tokens forwarded (each episode's own, no padding) since the trainer was built.
    forwarded_tokens: int = 0

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, torch.Tensor],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor:
        if return_outputs:
            raise NotImplementedError("the warm start only trains: no outputs to return")
        total = inputs["input_ids"].new_zeros((), dtype=torch.float32)
        for ids, mask, labels in zip(
            inputs["input_ids"], inputs["attention_mask"], inputs["labels"], strict=True
        ):
            length = int(mask.sum())  # right padding: the episode is the first `length`
            targets = labels[1:length]
            trained = (targets != -100).nonzero()
            self.forwarded_tokens += length
            if len(trained) == 0:
                continue
            first = int(trained[0, 0])  # the first position whose next token is trained
            logits = model(
                input_ids=ids[None, :length], logits_to_keep=length - first, use_cache=False
            ).logits[0, :-1]
            total = total + F.cross_entropy(
                logits.float(), targets[first:], ignore_index=-100, reduction="sum"
            )
        count = num_items_in_batch
        if count is None:
            count = (inputs["labels"][:, 1:] != -100).sum()
        return total / torch.as_tensor(count).clamp(min=1)


def reference_tasks(tasks: list[Task], per_category: int | None, seed: int) -> list[Task]:
    """The warm start's tasks: all of them, or `per_category` drawn from each category
    (`metadata['category']`; tasks without one form one category), in split order."""
    if per_category is None:
        return tasks
    by_category: dict[str, list[Task]] = {}
    for task in tasks:
        by_category.setdefault(str(task.metadata.get("category", "all")), []).append(task)
    rng = random.Random(seed)
    chosen = {
        task.id
        for group in by_category.values()
        for task in rng.sample(group, min(per_category, len(group)))
    }
    return [task for task in tasks if task.id in chosen]


def expert_dataset(
    env: Environment, settings: WarmStartSettings, tokenizer: Any, seed: int = 0
) -> tuple[Dataset, ExpertSet]:
    """The warm start's rows: `input_ids` of a whole expert episode and `completion_mask`
    on its assistant tokens (TRL's pre-tokenized format with `completion_only_loss`),
    and the expert set they came from (what was dropped and why)."""
    tasks = reference_tasks(env.tasks(settings.split), settings.tasks_per_category, seed)
    experts = asyncio.run(expert_trajectories(env, tasks, tokenizer))
    rows = [
        {"input_ids": t.token_ids, "completion_mask": t.agent_mask} for t in experts.trajectories
    ]
    return Dataset.from_list(rows), experts


def warm_start(
    model: Any,
    tokenizer: Any,
    dataset: Dataset,
    settings: WarmStartSettings,
    output_dir: Path,
    callbacks: list[Any] | None = None,
    optimizer_steps: int | None = None,
) -> dict[str, float]:
    """`settings.epochs` whole passes over the expert sequences, each in a fresh random
    order (every sequence trained once per epoch); returns the trainer's metrics, with
    the sequences and tokens trained on and their rate. `callbacks`: TRL/transformers
    trainer callbacks. `optimizer_steps`: each epoch in at most that many optimiser steps
    (micro-batches of `batch_size`, gradients accumulated), for a baseline held to another
    run's step budget rather than to a batch size."""
    began = time.perf_counter()
    accumulate = 1
    if optimizer_steps is not None:
        accumulate = max(1, -(-len(dataset) // (optimizer_steps * settings.batch_size)))
    steps_per_epoch = -(-len(dataset) // (settings.batch_size * accumulate))
    args = SFTConfig(
        output_dir=str(output_dir),
        num_train_epochs=settings.epochs,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=accumulate,
        learning_rate=settings.learning_rate,
        lr_scheduler_type="constant",
        logging_steps=max(1, steps_per_epoch * settings.epochs // 8),
        report_to="none",
        save_strategy="no",
        **trainer_compute_args(settings.precision),
        completion_only_loss=True,
        train_sampling_strategy="random",  # whole epochs: no sequence left out
        seed=0,
    )
    trainer = EpisodeSFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=callbacks,  # e.g. a benchmark keeping each epoch's adapter
    )
    show_steps(trainer, "warm start")
    result = trainer.train()
    release_mixed_precision(trainer)
    metrics = {k: float(v) for k, v in result.metrics.items() if isinstance(v, int | float)}
    tokens = trainer.forwarded_tokens
    seconds = time.perf_counter() - began
    metrics.update(
        episodes=float(len(dataset)),
        trained_sequences=float(len(dataset) * settings.epochs),
        optimizer_steps=float(trainer.state.global_step),
        trained_tokens=float(tokens),
        tokens_per_second=tokens / metrics.get("train_runtime", seconds),
        seconds=seconds,
    )
    return metrics
