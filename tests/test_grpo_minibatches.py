"""The GRPO step on the bundled model: an iteration's samples in several mini-batch
optimiser steps, the later ones corrected by the ratio to the served logprobs; each row
forwarded alone, without padding, scores as the padded batch."""

from __future__ import annotations

import pytest
import torch
from served_rows import served_rows
from trl import GRPOTrainer

from seal_graph.bundled_model import ensure_bundled_model
from seal_graph.records import TrainingSample
from seal_graph.training.grpo import TraceGRPOTrainer, grpo_step
from seal_graph.training.policy import Policy
from seal_graph.training.settings import LoraSettings, OptimConfig


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(ensure_bundled_model(), LoraSettings(r=4, alpha=8))


def _rows(policy: Policy) -> list[TrainingSample]:
    """Four samples; the last is an episode whose middle tokens (a tool result) are
    context, not the agent's."""
    answers = ["set x to 1", "add 2 and 3", "no idea", "hello there friend"]
    rows = served_rows(policy, answers, [1.0, 1.0, -1.0, -1.0])
    last = rows[-1]
    mask = [1] * len(last.completion_token_ids)
    mask[1:3] = [0, 0]
    logprobs = [lp if m else 0.0 for lp, m in zip(last.completion_logprobs, mask, strict=True)]
    rows[-1] = last.model_copy(update={"agent_mask": mask, "completion_logprobs": logprobs})
    return rows


def _stepped_batch(policy: Policy, rows: list[TrainingSample], tmp_path) -> tuple:
    """A trainer after one step on `rows`, their padded batch, and the forward's inputs
    (ids, attention mask, completion width)."""
    config = OptimConfig(learning_rate=1e-4, beta=0.0, micro_batch=4, precision="fp32")
    trainer, _ = grpo_step(policy.model, policy.tokenizer, rows, config, tmp_path)
    batch = trainer._padded([r.model_dump() for r in rows])
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    return trainer, batch, (ids, mask, batch["completion_ids"].size(1))


def test_second_mini_batch_is_off_policy_by_what_the_first_changed(
    policy: Policy, tmp_path, monkeypatch
) -> None:
    gaps: list[float] = []
    original = TraceGRPOTrainer._compute_loss

    def recording(self, model, inputs):
        with torch.no_grad():
            logps, _, _ = self._get_per_token_logps_and_entropies(
                model,
                torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
                torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
                inputs["completion_ids"].size(1),
            )
            agent = inputs["completion_mask"] * inputs["tool_mask"]
            gap = ((logps - inputs["old_per_token_logps"]).abs() * agent).sum() / agent.sum()
        gaps.append(float(gap))  # |log ratio| on the agent's tokens
        return original(self, model, inputs)

    monkeypatch.setattr(TraceGRPOTrainer, "_compute_loss", recording)
    config = OptimConfig(
        learning_rate=1e-3, beta=0.0, micro_batch=1, mini_batches=2, precision="fp32"
    )
    _, metrics = grpo_step(policy.model, policy.tokenizer, _rows(policy), config, tmp_path)
    assert metrics["optimizer_steps"] == 2 and metrics["samples"] == 4
    assert len(gaps) == 2
    assert gaps[0] < 1e-4  # first mini-batch: the served policy itself, ratio 1
    assert gaps[1] > 1e-3  # second: the first step moved the policy, ratio != 1
    assert 0.0 <= metrics["padding_share"] < 1.0
    assert metrics["agent_tokens"] == sum(sum(r.agent_mask) for r in _rows(policy))


@pytest.mark.parametrize(
    ("micro_batch", "mini_batches", "behaviour_passes"),
    [(4, 1, 0), (1, 2, 1)],
    ids=["one step: weights from the loss's forward", "two steps: a behaviour pass"],
)
def test_served_logprobs_off_the_trainers_are_measured_and_corrected_truncated(
    policy: Policy, tmp_path, monkeypatch, micro_batch, mini_batches, behaviour_passes
) -> None:
    """A server whose logprobs sit 1 nat below the trainer's (another engine's numerics):
    the step reports the gap, and each agent token's advantage carries the importance
    weight exp(1) truncated at the cap, whether the trainer's logprobs come from a
    behaviour pass (several optimiser steps) or from the loss's own forward (one)."""
    seen: list[torch.Tensor] = []
    original = TraceGRPOTrainer._compute_loss
    behaviour = TraceGRPOTrainer.behaviour_logprobs
    passes: list[int] = []

    def recording(self, model, inputs):
        loss = original(self, model, inputs)
        agent = (inputs["completion_mask"] * inputs["tool_mask"]).bool()
        seen.append(inputs["advantages"][agent].abs())  # the advantages the loss used
        return loss

    def counted(self, rows):
        passes.append(len(rows))
        return behaviour(self, rows)

    monkeypatch.setattr(TraceGRPOTrainer, "_compute_loss", recording)
    monkeypatch.setattr(TraceGRPOTrainer, "behaviour_logprobs", counted)
    rows = [
        r.model_copy(
            update={
                "completion_logprobs": [
                    lp - 1.0 if m else 0.0
                    for lp, m in zip(
                        r.completion_logprobs,
                        r.agent_mask or [1] * len(r.completion_logprobs),
                        strict=True,
                    )
                ]
            }
        )
        for r in _rows(policy)
    ]
    config = OptimConfig(
        learning_rate=1e-4,
        beta=0.0,
        micro_batch=micro_batch,
        mini_batches=mini_batches,
        tis_cap=2.0,
        precision="fp32",
    )
    _, metrics = grpo_step(policy.model, policy.tokenizer, rows, config, tmp_path)
    assert len(passes) == behaviour_passes
    assert metrics["optimizer_steps"] == mini_batches
    assert metrics["mismatch_mean"] == pytest.approx(1.0, abs=1e-3)
    assert metrics["tis_truncated_share"] == 1.0
    weights = torch.cat(seen)
    assert torch.allclose(weights, torch.full_like(weights, 2.0))  # |advantage| 1 x cap 2
    assert metrics["episodes"] == 1 and metrics["episode_tokens"] > 0


def test_rows_forwarded_alone_score_as_the_padded_batch(policy: Policy, tmp_path) -> None:
    """Each row cut to its own tokens and forwarded alone gives the logprobs and entropies
    TRL's padded batch gives (left-padded prompts, right-padded completions), in the same
    padded layout, to float rounding."""
    rows = _rows(policy)
    rows[0] = rows[0].model_copy(update={"prompt_token_ids": rows[0].prompt_token_ids[3:]})
    trainer, batch, (ids, mask, width) = _stepped_batch(policy, rows, tmp_path)
    with torch.no_grad():
        alone = trainer._get_per_token_logps_and_entropies(
            policy.model, ids, mask, width, compute_entropy=True
        )
        padded = GRPOTrainer._get_per_token_logps_and_entropies(
            trainer, policy.model, ids, mask, width, compute_entropy=True
        )
    real = batch["completion_mask"].bool()
    assert alone[0].shape == padded[0].shape == real.shape
    assert torch.allclose(alone[0][real], padded[0][real], atol=1e-3)
    assert torch.allclose(alone[1][real], padded[1][real], atol=1e-3)
    assert (alone[0][~real] == 0).all()


def test_scoring_the_agents_tokens_only_gives_their_logprobs_and_zero_elsewhere(
    policy: Policy, tmp_path
) -> None:
    """The LM head runs at the agent's positions only: those logprobs match scoring the
    whole completion; the tool result's positions (context) get 0."""
    rows = _rows(policy)
    trainer, batch, (ids, mask, width) = _stepped_batch(policy, rows, tmp_path)
    agent = (batch["completion_mask"] * batch["agent_mask"]).bool()
    with torch.no_grad():
        everywhere = trainer._get_per_token_logps_and_entropies(policy.model, ids, mask, width)[0]
        with trainer._scoring(agent.long()):
            scored = trainer._get_per_token_logps_and_entropies(policy.model, ids, mask, width)[0]
    assert torch.allclose(scored[agent], everywhere[agent], atol=1e-4)
    assert (scored[~agent] == 0).all() and (everywhere[3, 1:3] != 0).all()


def test_a_token_bound_shrinks_the_micro_batches_of_a_reused_trainer(
    policy: Policy, tmp_path, monkeypatch
) -> None:
    """Micro-batches bounded by tokens: the same trainer takes all four samples in one
    micro-batch, then, with a bound below two samples' length, one at a time."""
    calls: list[int] = []
    original = TraceGRPOTrainer._compute_loss

    def counted(self, model, inputs):
        calls.append(inputs["completion_ids"].size(0))
        return original(self, model, inputs)

    monkeypatch.setattr(TraceGRPOTrainer, "_compute_loss", counted)
    rows = _rows(policy)
    longest = max(len(r.prompt_token_ids) + len(r.completion_token_ids) for r in rows)
    config = OptimConfig(learning_rate=1e-4, beta=0.0, micro_batch=2, precision="fp32")
    trainer, first = grpo_step(policy.model, policy.tokenizer, rows, config, tmp_path)
    bounded = config.model_copy(update={"micro_batch_tokens": 2 * longest - 1})
    _, second = grpo_step(policy.model, policy.tokenizer, rows, bounded, tmp_path, trainer)
    assert calls == [4, 1, 1, 1, 1]
    assert (first["micro_batch_rows"], second["micro_batch_rows"]) == (4, 1)
    assert first["optimizer_steps"] == second["optimizer_steps"] == 1  # accumulated
