"""Trajectory-level DPO with TRL's DPOTrainer (the target agent and the failure agent).

How TRL is extended. `DPOTrainer` scores a completion as the sum of its token
log-probabilities, every token after the prompt. A multi-turn trajectory's continuation
also holds tool results and later user turns, which the agent did not produce. So:

* rows arrive tokenized (`training/trajectories.py`): prompt, chosen and rejected ids
  plus `chosen_mask` / `rejected_mask`, 1 on the agent's own tokens;
  `TrajectoryDPOTrainer._prepare_dataset` keeps them as they are;
* `AgentTokenCollator` (a `DataCollatorForPreference`) replaces TRL's all-ones
  completion mask with those masks, so TRL's loss sums agent tokens only;
* the reference is the policy as it stands at the start of the round (adapter on: the
  warm-started or previous-iteration agent, as in ETO), not the bare base model TRL
  would use for a PEFT model. `reference_logps` computes it once per round and the
  rows carry it as `ref_chosen_logps` / `ref_rejected_logps`, TRL's own precomputed
  columns.

TRL's sigmoid DPO loss, optimiser and logging are unchanged.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from trl import DPOConfig, DPOTrainer
from trl.trainer.dpo_trainer import DataCollatorForPreference

from seal_graph.training.compute import (
    peak_rss_mb,
    release_mixed_precision,
    reset_peak_rss,
    trainer_compute_args,
    use_bf16,
)
from seal_graph.training.preferences import PreferencePair, prompt_length
from seal_graph.training.run_output import show_steps
from seal_graph.training.settings import DPOSettings
from seal_graph.training.trajectories import rendered_trajectory

BOOKKEEPING = ("task_id", "chosen_source")
"""Row fields for the budget's accounting (`dpo_step`'s metrics), not for the trainer."""


@dataclass
class AgentTokenCollator(DataCollatorForPreference):
    """TRL's preference collator with the loss mask on the agent's own tokens."""

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        output = super().torch_call(examples)
        masks = [[0] * len(e["prompt_ids"]) + e["chosen_mask"] for e in examples]
        masks += [[0] * len(e["prompt_ids"]) + e["rejected_mask"] for e in examples]
        width = output["input_ids"].shape[1]
        completion_mask = torch.zeros((len(masks), width), dtype=torch.long)
        for row, mask in enumerate(masks):
            mask = mask[:width]
            completion_mask[row, : len(mask)] = torch.tensor(mask, dtype=torch.long)
        output["completion_mask"] = completion_mask
        return output


class TrajectoryDPOTrainer(DPOTrainer):
    """DPOTrainer over pre-tokenized, agent-masked trajectory pairs (module docstring)."""

    def _prepare_dataset(self, dataset: Dataset, *args: Any, **kwargs: Any) -> Dataset:
        return dataset


def pair_rows(
    tokenizer: Any, pairs: list[PreferencePair], tools_for: Callable[[str], list[dict]]
) -> list[dict[str, Any]]:
    """Tokenized rows (prompt, chosen, rejected, their agent masks) for the pairs;
    `tools_for(task_id)` gives the tool schemas the prompt shows."""
    rows = []
    for pair in pairs:
        tools = tools_for(pair.task_id)
        size = prompt_length(pair.chosen)
        chosen = rendered_trajectory(tokenizer, pair.chosen.messages, tools, size)
        rejected = rendered_trajectory(tokenizer, pair.rejected.messages, tools, size)
        if rejected.prompt_ids != chosen.prompt_ids:
            raise ValueError(f"pair for task {pair.task_id} does not share its prompt")
        if not any(chosen.continuation_mask) or not any(rejected.continuation_mask):
            continue  # nothing the agent produced on one side: no preference to learn
        rows.append(
            {
                "prompt_ids": chosen.prompt_ids,
                "chosen_ids": chosen.continuation_ids,
                "rejected_ids": rejected.continuation_ids,
                "chosen_mask": chosen.continuation_mask,
                "rejected_mask": rejected.continuation_mask,
                "chosen_score": pair.chosen.score,
                "rejected_score": pair.rejected.score,
                "task_id": pair.task_id,
                "chosen_source": pair.chosen.source,
            }
        )
    return rows


def pair_tokens(row: dict[str, Any]) -> int:
    """Tokens a pair puts through the model: TRL prepends the prompt to each side."""
    return 2 * len(row["prompt_ids"]) + len(row["chosen_ids"]) + len(row["rejected_ids"])


@torch.no_grad()
def reference_logps(
    model: Any,
    collator: AgentTokenCollator,
    rows: list[dict[str, Any]],
    micro_batch: int,
    bf16: bool = False,
) -> list[dict[str, Any]]:
    """Rows with the current policy's summed agent-token logps (the DPO reference)."""
    model.eval()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = []
    for start in range(0, len(rows), micro_batch):
        chunk = rows[start : start + micro_batch]
        batch = collator.torch_call([dict(r) for r in chunk])
        ids = batch["input_ids"]
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=ids, attention_mask=batch["attention_mask"]).logits
        logits = logits[:, :-1]
        logps = torch.log_softmax(logits.float(), dim=-1).gather(2, ids[:, 1:, None])[..., 0]
        sums = (logps * batch["completion_mask"][:, 1:]).sum(1)
        chosen, rejected = sums.chunk(2)
        out += [
            {**row, "ref_chosen_logps": float(c), "ref_rejected_logps": float(r)}
            for row, c, r in zip(chunk, chosen, rejected, strict=True)
        ]
    return out


def dpo_step(
    model: Any,
    tokenizer: Any,
    rows: list[dict[str, Any]],
    settings: DPOSettings,
    beta: float,
    output_dir: Path,
    seed: int = 0,
) -> dict[str, Any]:
    """One round of DPO over the rows: `epochs` passes, `batch_pairs` pairs per step."""
    reset_peak_rss()
    began = time.perf_counter()
    if settings.max_pairs and len(rows) > settings.max_pairs:
        rows = random.Random(seed).sample(rows, settings.max_pairs)
    if not rows:
        return {"pairs": 0.0, "seconds": time.perf_counter() - began}
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    collator = AgentTokenCollator(pad_token_id=tokenizer.pad_token_id)
    bf16 = use_bf16(settings.precision)
    rows = reference_logps(model, collator, rows, settings.micro_batch, bf16)
    micro = min(settings.micro_batch, len(rows))
    limit = settings.checkpoint_above_tokens
    checkpointing = limit is not None and micro * max(map(pair_tokens, rows)) > limit
    args = DPOConfig(
        output_dir=str(output_dir),
        beta=beta,
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=max(1, -(-min(settings.batch_pairs, len(rows)) // micro)),
        num_train_epochs=settings.epochs,
        lr_scheduler_type="constant",
        max_length=None,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        **trainer_compute_args(settings.precision, gradient_checkpointing=checkpointing),
        remove_unused_columns=False,
        seed=seed,
    )
    # accelerate marks a model it prepared and never prepares it again; the last round's
    # trainer took its autocast wrapper off (release_mixed_precision), so without this a
    # later round trains without autocast, against a reference computed under it (a
    # second bf16 round then started at a reward margin of ~0.7 instead of 0, measured)
    model.__dict__.pop("_is_accelerate_prepared", None)
    trainer = TrajectoryDPOTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(
            [{k: r[k] for k in r if k not in BOOKKEEPING} for r in rows]
        ),
        processing_class=tokenizer,
        data_collator=collator,
    )
    trainer.precompute_ref_logps = True  # the rows carry the reference (see above)
    show_steps(trainer, "DPO round")
    try:
        result = trainer.train()
    finally:
        release_mixed_precision(trainer)
        if checkpointing:  # the policy outlives the round: later stages run without it
            model.gradient_checkpointing_disable()
        # TRL copies the policy's adapter into a "ref" adapter for PEFT models; the rows
        # carry the reference, so it is unused, and left behind it makes the next round's
        # trainer fail ("Adapter with name 'ref' already exists") and gets saved.
        if "ref" in getattr(model, "peft_config", {}):
            model.delete_adapter("ref")
    logged = [entry for entry in trainer.state.log_history if "rewards/margins" in entry]
    metrics = {k: float(v) for k, v in result.metrics.items() if isinstance(v, int | float)}
    metrics.update(
        pairs=float(len(rows)),
        # the budget: tokens trained on, and which tasks' expert sequences were replayed
        trained_tokens=float(sum(pair_tokens(row) for row in rows)),
        expert_tasks=sorted({r["task_id"] for r in rows if r.get("chosen_source") == "expert"}),
        optimizer_steps=float(trainer.state.global_step),
        gradient_checkpointing=float(checkpointing),
        beta=beta,
        reward_margin=float(logged[-1]["rewards/margins"]) if logged else 0.0,
        reward_accuracy=float(logged[-1].get("rewards/accuracies", 0.0)) if logged else 0.0,
        seconds=time.perf_counter() - began,
        peak_rss_mb=peak_rss_mb(),
    )
    return metrics
