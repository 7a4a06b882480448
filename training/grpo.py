"""Diagnosis-reweighted GRPO on stored trajectories, with TRL's GRPOTrainer.

How TRL is extended. `GRPOTrainer` generates inside `_generate_and_score_completions`
(called from `_prepare_inputs`) and computes the clipped surrogate in `_compute_loss`.
Our rollouts are multi-call, multi-turn LangGraph episodes served by vLLM, so
`TraceGRPOTrainer` overrides two hooks and keeps everything else:

* `_generate_and_score_completions` builds the batch from stored samples instead of
  generating. A sample is a whole episode as one served sequence (the first call's
  prompt, then everything after it; `training/trajectories.py`) or, where an episode's
  calls do not chain, one LLM call. Token ids are exactly as served (no
  re-tokenisation); `old_per_token_logps` are the trainer's own logprobs of the batch
  before the step changes anything (`behaviour_logprobs`, one no-grad pass under the
  training precision, when the iteration takes several optimiser steps; with one, the
  loss's own forward: see `_compute_loss` below), so the first mini-batch starts at
  ratio 1 and later ones are off-policy by exactly what the earlier ones changed; the
  advantage is per token (the episode's or its turn's diagnosis-weighted advantage)
  times the truncated importance weight min(exp(trainer - served logprob), tis_cap) that
  corrects for the serving engine's own numerics (TRL's `token_truncate` correction,
  which it applies only with its own vLLM generation; a non-negative weight on the
  advantage is the same loss); and `tool_mask` — which TRL multiplies into the loss
  mask — is 1 only on the agent's own sampled tokens, so tool results, user
  turns and template tokens are context, not actions. With `beta > 0` the reference
  logprobs come from the policy's kept reference adapter (the warm start: RL's starting
  point), or, without one, from the model with its adapter switched off, as TRL does.
* `_get_per_token_logps_and_entropies` forwards each row of a micro-batch alone, cut
  to its own tokens, scores its completion positions only, and lays the results back
  out in the padded batch: no compute on padding or on the first prompt's LM head.
* `_get_train_sampler` groups samples of similar length into micro-batches (small padded
  tensors); groups were formed at rollout time, so TRL's prompt-repeating sampler does
  not apply.

* `_compute_loss`, when the step is a single optimiser step (one mini-batch, one epoch),
  skips the behaviour pass: every row is then forwarded once, before the only update, so
  the loss's own forward gives the behaviour logprobs. TRL takes `old_per_token_logps`
  from that forward (detached) when the batch has none, and the importance weight is
  applied to the batch's advantages right after it (`_get_per_token_logps_and_entropies`
  sees the batch `_compute_loss` is working on; TRL reads the advantages after the
  forward, which `tests/test_trl_hooks.py` pins). On the README's main command that is
  one no-grad pass over every episode less per iteration.

TRL's `_compute_loss` then applies the clipped ratio (epsilon), the KL term (beta) and
the loss aggregation unchanged.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from datasets import Dataset
from torch.utils.data import Sampler
from transformers.trainer_pt_utils import LengthGroupedSampler
from trl import GRPOConfig, GRPOTrainer

from seal_graph.records import TrainingSample
from seal_graph.training.compute import (
    peak_rss_mb,
    release_mixed_precision,
    reset_peak_rss,
    trainer_compute_args,
)
from seal_graph.training.policy import reference_weights
from seal_graph.training.run_output import show_steps
from seal_graph.training.settings import OptimConfig
from seal_graph.training.token_logprobs import chosen_logprobs


def _never_called(*args: Any, **kwargs: Any) -> list[float]:
    raise AssertionError("rewards come from the stored verifier verdicts")


@dataclass
class ServingMismatch:
    """How far the server's logprobs of the agent's tokens are from the trainer's before
    the update, tallied over a step's batches."""

    tokens: int = 0
    gap_sum: float = 0.0
    gap_max: float = 0.0
    truncated: int = 0

    def add(self, gaps: torch.Tensor, cap: float) -> None:
        """`gaps`: trainer minus served logprob on each agent token."""
        if gaps.numel():
            sizes = gaps.abs()
            self.tokens += gaps.numel()
            self.gap_sum += float(sizes.sum())
            self.gap_max = max(self.gap_max, float(sizes.max()))
            self.truncated += int((gaps > math.log(cap)).sum())

    def metrics(self) -> dict[str, float]:
        """Mean and max |gap| per token, and the share of tokens whose importance weight
        the cap truncated."""
        if not self.tokens:
            return {}
        return {
            "mismatch_mean": self.gap_sum / self.tokens,
            "mismatch_max": self.gap_max,
            "tis_truncated_share": self.truncated / self.tokens,
        }


class TraceGRPOTrainer(GRPOTrainer):
    """GRPOTrainer over stored, served trajectories (see the module docstring)."""

    #: Tokens of the batches built since the counts were reset: forwarded (rows go alone,
    #: so no padding: the same as real), real, and the agent's own (where the loss falls).
    token_counts: Counter[str]

    #: Truncated importance sampling cap (`OptimConfig.tis_cap`).
    tis_cap: float = 2.0

    #: The served-vs-trainer gaps of the batches built or forwarded since it was reset.
    mismatch: ServingMismatch

    #: The batch `_compute_loss` is working on while its own forward is the behaviour
    #: pass (a batch without `old_per_token_logps`); None otherwise.
    _on_policy_batch: dict[str, Any] | None = None

    #: Completion positions the next forwards score (`_scoring`); None: all of them.
    _scored: torch.Tensor | None = None

    #: Optimiser state to start from (a launched step continues the previous step's Adam
    #: moments from the file the previous process wrote).
    initial_optimizer_state: Path | None = None

    def create_optimizer(self) -> torch.optim.Optimizer:
        optimizer = super().create_optimizer()
        state = self.initial_optimizer_state
        if state is not None and state.is_file():
            optimizer.load_state_dict(torch.load(state, weights_only=True))
            self.initial_optimizer_state = None  # only the first train() call starts from it
        return optimizer

    def _get_train_sampler(self, dataset: Dataset | None = None) -> Sampler:
        dataset = dataset if dataset is not None else self.train_dataset
        lengths = [
            len(p) + len(c)
            for p, c in zip(
                dataset["prompt_token_ids"], dataset["completion_token_ids"], strict=True
            )
        ]
        # Micro-batches of similar lengths (random order otherwise): small padded tensors.
        return LengthGroupedSampler(self._train_batch_size, lengths=lengths)

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **multimodal: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """TRL's per-token logprobs (and entropies), each row forwarded alone, cut to its
        own tokens, and scored only where the agent's tokens are.

        A micro-batch's rows are padded to its longest (left-padded prompt, right-padded
        completion). Forwarded as one batch, the padding costs compute and memory, and
        TRL's fused LM head projects every position off a GPU, the first prompt's too.
        Alone, a row is exactly the sequence the server saw, from position 0. The LM head
        runs only at the positions that predict a token the loss falls on (`_scored`: the
        agent's sampled tokens; every completion token when unset): a whole episode's
        tool results and user turns are context, and full-vocabulary logits over them
        were most of a step's memory (`token_logprobs`). The results are laid back out in
        the padded batch's shape, 0 at unscored positions (masked out of the loss)."""
        if compute_aux_loss or any(value is not None for value in multimodal.values()):
            raise NotImplementedError("trajectory rows are text-only, dense-model rows")
        completion_start = input_ids.size(1) - logits_to_keep
        scored = self._scored if self._scored is not None else attention_mask[:, completion_start:]
        logps, entropies = [], []
        for ids, mask, keep in zip(input_ids, attention_mask, scored.bool(), strict=True):
            real = mask.nonzero()[:, 0]  # one contiguous span: prompt then completion
            first = int(real[0])
            row = ids[None, first : int(real[-1]) + 1]
            targets = keep.nonzero()[:, 0]  # completion indices scored
            row_logps = torch.zeros(logits_to_keep, device=ids.device)
            row_entropy = torch.zeros(logits_to_keep, device=ids.device)
            if targets.numel():
                positions = targets + completion_start - first - 1  # the state before each
                with self.accelerator.autocast():
                    logits = model(input_ids=row, logits_to_keep=positions, use_cache=False).logits
                chosen, entropy = chosen_logprobs(
                    logits[0], row[0, positions + 1], self.temperature, compute_entropy
                )
                row_logps = row_logps.index_put((targets,), chosen)
                if entropy is not None:
                    row_entropy = row_entropy.index_put((targets,), entropy)
            logps.append(row_logps)
            entropies.append(row_entropy)
        per_token_logps = torch.stack(logps)
        batch, self._on_policy_batch = self._on_policy_batch, None  # the policy's forward
        if batch is not None:
            weight = self._importance_weight(per_token_logps.detach(), batch)
            batch["advantages"] = batch["advantages"] * weight
        return per_token_logps, torch.stack(entropies) if compute_entropy else None, None

    @contextlib.contextmanager
    def _scoring(self, mask: torch.Tensor) -> Iterator[None]:
        """Forwards inside score only where `mask` (completion-shaped) is 1."""
        self._scored = mask
        try:
            yield
        finally:
            self._scored = None

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """TRL's loss; a batch without behaviour logprobs gets its importance weights from
        the loss's own forward (see the module docstring)."""
        if inputs.get("old_per_token_logps") is None:
            self._on_policy_batch = inputs
        try:
            with self._scoring(inputs["completion_mask"] * inputs["tool_mask"]):
                return super()._compute_loss(model, inputs)
        finally:
            self._on_policy_batch = None

    def _importance_weight(
        self, trainer_logps: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """min(exp(trainer - served logprob), tis_cap) on the agent's tokens, 1 elsewhere;
        the gaps are tallied in `mismatch`."""
        agent = batch["tool_mask"].bool()
        gaps = trainer_logps - batch["served_logps"]
        self.mismatch.add(gaps[agent], self.tis_cap)
        weight = torch.exp(gaps).clamp(max=self.tis_cap)
        return torch.where(agent, weight, torch.ones_like(weight))

    @torch.no_grad()
    def behaviour_logprobs(self, rows: list[dict[str, Any]]) -> list[list[float]]:
        """The trainer's logprobs of each row's completion, before this step updates the
        policy, in micro-batches of similar length."""
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]["completion_token_ids"]))
        size = self.args.per_device_train_batch_size
        out: list[list[float]] = [[] for _ in rows]
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            batch = self._padded([rows[i] for i in chunk])
            with self._scoring(batch["completion_mask"] * batch["agent_mask"]):
                logps, _, _ = self._get_per_token_logps_and_entropies(
                    self.model,
                    torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1),
                    torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1),
                    batch["completion_ids"].size(1),
                )
            for row, index in enumerate(chunk):
                out[index] = logps[row, : len(rows[index]["completion_token_ids"])].tolist()
        return out

    def _padded(self, batch: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """The rows as left-padded prompts and right-padded completions, with their masks,
        per-token advantages and served logprobs."""
        pad = self.processing_class.pad_token_id or 0
        prompts = [row["prompt_token_ids"] for row in batch]
        completions = [row["completion_token_ids"] for row in batch]
        width_p, width_c = max(map(len, prompts)), max(map(len, completions))
        prompt_ids = torch.full((len(batch), width_p), pad, dtype=torch.long)
        prompt_mask = torch.zeros((len(batch), width_p), dtype=torch.long)
        completion_ids = torch.full((len(batch), width_c), pad, dtype=torch.long)
        completion_mask = torch.zeros((len(batch), width_c), dtype=torch.long)
        agent_mask = torch.zeros((len(batch), width_c), dtype=torch.long)
        advantages = torch.zeros((len(batch), width_c), dtype=torch.float32)
        served = torch.zeros((len(batch), width_c), dtype=torch.float32)
        for i, row in enumerate(batch):
            p, c = row["prompt_token_ids"], row["completion_token_ids"]
            prompt_ids[i, width_p - len(p) :] = torch.tensor(p)  # left padding
            prompt_mask[i, width_p - len(p) :] = 1
            completion_ids[i, : len(c)] = torch.tensor(c)
            completion_mask[i, : len(c)] = 1
            agent_mask[i, : len(c)] = torch.tensor(row["agent_mask"] or [1] * len(c))
            advantages[i, : len(c)] = torch.tensor(
                row["token_advantages"] or [row["advantage"]] * len(c)
            )
            served[i, : len(c)] = torch.tensor(row["completion_logprobs"])
        device = self.accelerator.device
        return {
            "prompt_ids": prompt_ids.to(device),
            "prompt_mask": prompt_mask.to(device),
            "completion_ids": completion_ids.to(device),
            "completion_mask": completion_mask.to(device),
            "agent_mask": agent_mask.to(device),
            "advantages": advantages.to(device),
            "served_logps": served.to(device),
        }

    def _generate_and_score_completions(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        padded = self._padded(batch)
        agent_mask, width_c = padded["agent_mask"], padded["completion_ids"].size(1)
        real = int(padded["prompt_mask"].sum() + padded["completion_mask"].sum())
        self.token_counts["forwarded"] += real  # each row alone, without its padding
        self.token_counts["real"] += real
        self.token_counts["agent"] += int(agent_mask.sum())
        output = {
            **{k: padded[k] for k in ("prompt_ids", "prompt_mask", "completion_ids")},
            "completion_mask": padded["completion_mask"],
            # TRL multiplies this into the loss mask: tool results, user turns and template
            # tokens are attended to but not trained on
            "tool_mask": agent_mask,
            "advantages": padded["advantages"],
            "served_logps": padded["served_logps"],
            "num_items_in_batch": agent_mask.sum(),
        }
        if "train_logprobs" in batch[0]:  # behaviour logprobs from before the step
            old_logps = torch.zeros_like(padded["served_logps"])  # same device
            for i, row in enumerate(batch):
                old_logps[i, : len(row["train_logprobs"])] = torch.tensor(row["train_logprobs"])
            output["old_per_token_logps"] = old_logps
            output["advantages"] = output["advantages"] * self._importance_weight(old_logps, output)
        if self.beta != 0.0:
            model = self.accelerator.unwrap_model(self.model)
            scored = output["completion_mask"] * agent_mask
            with torch.no_grad(), reference_weights(model), self._scoring(scored):
                ref, _, _ = self._get_per_token_logps_and_entropies(
                    self.model,
                    torch.cat([output["prompt_ids"], output["completion_ids"]], 1),
                    torch.cat([output["prompt_mask"], output["completion_mask"]], 1),
                    width_c,
                    batch_size=self.args.per_device_train_batch_size,
                )
            output["ref_per_token_logps"] = ref
        return output


def micro_batch_rows(rows: list[TrainingSample], config: OptimConfig) -> int:
    """Samples per micro-batch: `micro_batch` pairs, fewer when `micro_batch_tokens`
    bounds them (counted at the longest sample, so every micro-batch fits), at least one
    and at most the step's samples. A micro-batch of one is the same loss: TRL averages
    each sample's tokens, then the micro-batch's samples, then the accumulated ones."""
    size = 2 * config.micro_batch
    if config.micro_batch_tokens is not None:
        longest = max(len(r.prompt_token_ids) + len(r.completion_token_ids) for r in rows)
        size = min(size, config.micro_batch_tokens // longest)
    return max(1, min(size, len(rows)))


def grpo_step(
    policy_model: Any,
    tokenizer: Any,
    rows: list[TrainingSample],
    config: OptimConfig,
    output_dir: Path,
    trainer: TraceGRPOTrainer | None = None,
    optimizer_state: Path | None = None,
) -> tuple[TraceGRPOTrainer, dict[str, float]]:
    """One optimiser step over the batch (gradient accumulation across micro-batches).

    The trainer is reused across iterations so the optimiser state persists; pass the
    one returned by the previous call, or, in a fresh process, the `optimizer_state` file
    an earlier step saved. Under a distributed launcher each rank sees its share of the
    rows and gradients are all-reduced: still one optimiser step per call.
    """
    reset_peak_rss()
    if config.drop_zero_advantage and config.beta == 0.0:
        rows = [r for r in rows if r.advantage != 0.0]
    if config.max_samples and len(rows) > config.max_samples:
        rows = random.Random(len(rows)).sample(rows, config.max_samples)
    if not rows:
        return trainer, {"samples": 0.0}
    micro = micro_batch_rows(rows, config)
    batches = -(-len(rows) // (micro * PartialState().num_processes))
    accumulation = max(1, -(-batches // config.mini_batches))
    records = [{**r.model_dump(), "prompt": ""} for r in rows]
    if trainer is None:
        args = GRPOConfig(
            output_dir=str(output_dir),
            learning_rate=config.learning_rate,
            beta=config.beta,
            epsilon=config.epsilon,
            loss_type=config.loss_type,
            num_generations=2,
            per_device_train_batch_size=2,  # a pair passes the checks; set below
            gradient_accumulation_steps=1,
            steps_per_generation=1,
            num_train_epochs=config.epochs,
            max_grad_norm=config.max_grad_norm,
            lr_scheduler_type="constant",
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            **trainer_compute_args(config.precision),
            remove_unused_columns=False,
            disable_tqdm=True,
        )
        trainer = TraceGRPOTrainer(
            model=policy_model,
            reward_funcs=_never_called,
            args=args,
            train_dataset=Dataset.from_list(records),
            processing_class=tokenizer,
        )
        trainer.initial_optimizer_state = optimizer_state
        show_steps(trainer, "GRPO step")
    # set after the config's checks (which want pairs: GRPO's groups; ours were formed
    # at rollout time), on the trainer's copy too: a reused trainer keeps its first size
    trainer.args.per_device_train_batch_size = trainer._train_batch_size = micro
    trainer.tis_cap = config.tis_cap
    trainer.mismatch = ServingMismatch()
    if config.epochs > 1 or accumulation < batches:  # later mini-batches are off-policy
        behaviour = trainer.behaviour_logprobs(records)
        records = [{**r, "train_logprobs": b} for r, b in zip(records, behaviour, strict=True)]
    trainer.train_dataset = Dataset.from_list(records)
    trainer.args.gradient_accumulation_steps = accumulation
    trainer.args.num_train_epochs = config.epochs
    trainer.token_counts = Counter()
    try:
        result = trainer.train()
    finally:
        release_mixed_precision(trainer)  # the policy's later logprobs (swap probe) in fp32
    metrics = {k: float(v) for k, v in result.metrics.items() if isinstance(v, int | float)}
    counts = trainer.token_counts
    episode_lengths: dict[str, int] = {}  # an episode's own length: its longest sample
    for row in rows:
        length = len(row.prompt_token_ids) + len(row.completion_token_ids)
        episode_lengths[row.episode_id] = max(length, episode_lengths.get(row.episode_id, 0))
    metrics.update(
        samples=float(len(rows)),
        calls=float(sum(r.calls for r in rows)),
        micro_batch_rows=float(micro),
        optimizer_steps=float(trainer.state.global_step),
        forwarded_tokens=float(counts["forwarded"]),
        padding_share=1 - counts["real"] / counts["forwarded"] if counts["forwarded"] else 0.0,
        episodes=float(len(episode_lengths)),
        episode_tokens=float(sum(episode_lengths.values())),
        tokens_per_second=counts["real"] / metrics["train_runtime"]
        if metrics.get("train_runtime")
        else 0.0,
        agent_tokens=float(counts["agent"]),
        peak_rss_mb=peak_rss_mb(),
        **trainer.mismatch.metrics(),
    )
    return trainer, metrics
