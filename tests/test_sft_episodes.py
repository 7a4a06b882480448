"""The warm start's SFT step on the bundled model: each expert episode forwarded alone,
cut to its own tokens and scored from its first agent token on, gives TRL's loss on the
padded batch."""

from __future__ import annotations

import torch
from trl import SFTConfig, SFTTrainer

from seal_graph.bundled_model import ensure_bundled_model
from seal_graph.registry import get_environment
from seal_graph.training.compute import trainer_compute_args
from seal_graph.training.policy import Policy
from seal_graph.training.settings import LoraSettings, WarmStartSettings
from seal_graph.training.sft import EpisodeSFTTrainer, expert_dataset, warm_start


def test_episodes_forwarded_alone_give_trls_loss_on_the_padded_batch(tmp_path) -> None:
    policy = Policy(ensure_bundled_model(), LoraSettings(r=4, alpha=8))
    settings = WarmStartSettings(tasks_per_category=1, batch_size=3, precision="fp32")
    dataset, _ = expert_dataset(get_environment("kv-calc"), settings, policy.tokenizer)
    args = SFTConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=3,
        completion_only_loss=True,
        report_to="none",
        **trainer_compute_args("fp32"),
    )
    trainer = EpisodeSFTTrainer(
        model=policy.model, args=args, train_dataset=dataset, processing_class=policy.tokenizer
    )
    batch = trainer.data_collator([dataset[i] for i in range(len(dataset))])
    lengths = batch["attention_mask"].sum(1)
    assert len(set(lengths.tolist())) > 1  # the batch is padded: episodes differ in length
    with torch.no_grad():
        alone = trainer.compute_loss(trainer.model, dict(batch))
        padded = SFTTrainer.compute_loss(trainer, trainer.model, dict(batch))
    assert torch.allclose(alone, padded, atol=1e-4), (alone, padded)
    assert trainer.forwarded_tokens == int(lengths.sum())


def test_a_step_budget_trains_every_sequence_once_in_that_many_optimiser_steps(
    tmp_path,
) -> None:
    """sft-more is held to a GRPO run's optimiser steps (benchmarks/learning_runs.py): the
    pass accumulates micro-batches instead of taking one step per `batch_size`."""
    policy = Policy(ensure_bundled_model(), LoraSettings(r=4, alpha=8))
    settings = WarmStartSettings(
        tasks_per_category=1, batch_size=1, epochs=1, learning_rate=1e-4, precision="fp32"
    )
    dataset, _ = expert_dataset(get_environment("kv-calc"), settings, policy.tokenizer)
    assert len(dataset) >= 4  # so that one step per sequence would be more than 2
    metrics = warm_start(
        policy.model, policy.tokenizer, dataset, settings, tmp_path, optimizer_steps=2
    )
    assert metrics["optimizer_steps"] == 2
    lengths = sum(len(row["input_ids"]) for row in dataset)
    assert metrics["trained_tokens"] == lengths  # every sequence forwarded once
