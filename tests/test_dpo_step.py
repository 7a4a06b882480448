"""A DPO round on the policy's LoRA adapter, as the loop runs one per iteration: after a
bf16-autocast round the policy computes logprobs in float32 again (accelerate leaves an
autocast wrapper on `forward`; swap probes would then disagree with the float32 server),
a second round on the same policy trains (TRL's leftover reference adapter once made
it fail) and, under bf16, against its own reference, and a round of long pairs trains
through gradient checkpointing and leaves the policy without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from seal_graph.bundled_model import ensure_bundled_model
from seal_graph.training.compute import use_bf16
from seal_graph.training.dpo import dpo_step
from seal_graph.training.policy import Policy
from seal_graph.training.settings import DPOSettings, LoraSettings


@pytest.fixture
def policy() -> Policy:
    return Policy(ensure_bundled_model(), LoraSettings(r=4, alpha=8))


def pair(policy: Policy) -> tuple[list[int], list[int], dict[str, Any]]:
    """Prompt ids, chosen ids and the preference row 'yes' over 'no'."""
    prompt = policy.tokenizer("Is fire hot?", add_special_tokens=False)["input_ids"]
    yes = policy.tokenizer(" yes<|im_end|>", add_special_tokens=False)["input_ids"]
    no = policy.tokenizer(" no<|im_end|>", add_special_tokens=False)["input_ids"]
    row = {
        "prompt_ids": prompt,
        "chosen_ids": yes,
        "rejected_ids": no,
        "chosen_mask": [1] * len(yes),
        "rejected_mask": [1] * len(no),
    }
    return prompt, yes, row


@pytest.mark.skipif(not use_bf16("auto"), reason="no bf16 kernels on this CPU")
def test_dpo_round_in_bf16_leaves_the_policy_in_float32(policy: Policy, tmp_path: Path) -> None:
    prompt, yes, row = pair(policy)
    before = policy.completion_logprobs(prompt, yes)
    settings = DPOSettings(precision="bf16", learning_rate=1e-9, micro_batch=1, batch_pairs=1)
    metrics = dpo_step(policy.model, policy.tokenizer, [row], settings, 0.1, tmp_path)
    assert metrics["pairs"] == 1
    assert "_original_forward" not in policy.model.__dict__
    after = policy.completion_logprobs(prompt, yes)
    # lr 1e-9 leaves the weights as they were: float32 logprobs agree to float32 noise
    assert max(abs(a - b) for a, b in zip(before, after, strict=True)) < 1e-4


def test_second_dpo_round_on_the_same_policy_trains(policy: Policy, tmp_path: Path) -> None:
    prompt, yes, row = pair(policy)
    settings = DPOSettings(precision="fp32", learning_rate=1e-3, micro_batch=1, batch_pairs=1)
    first = dpo_step(policy.model, policy.tokenizer, [row], settings, 0.1, tmp_path / "r0")
    after_first = policy.completion_logprobs(prompt, yes)
    second = dpo_step(policy.model, policy.tokenizer, [row], settings, 0.5, tmp_path / "r1")
    assert first["pairs"] == second["pairs"] == 1
    assert first["gradient_checkpointing"] == 0  # short pairs: activations kept
    assert first["optimizer_steps"] == second["optimizer_steps"] == 1  # 1 pair per step
    assert list(policy.model.peft_config) == ["default"]
    assert policy.model.active_adapter == "default"
    after_second = policy.completion_logprobs(prompt, yes)
    # the second round moved the weights: 'yes' became more likely again
    assert sum(after_second) > sum(after_first)


@pytest.mark.skipif(not use_bf16("auto"), reason="no bf16 kernels on this CPU")
def test_every_bf16_round_trains_against_its_own_reference(policy: Policy, tmp_path: Path) -> None:
    """The reference is the round's starting policy, computed under bf16 autocast: the
    round must train under it too. accelerate prepared the model once and skipped it
    after, so later rounds trained in fp32 against a bf16 reference (margin ~0.7)."""
    _, _, row = pair(policy)
    settings = DPOSettings(precision="bf16", learning_rate=1e-3, micro_batch=1, batch_pairs=1)
    first = dpo_step(policy.model, policy.tokenizer, [row], settings, 0.1, tmp_path / "r0")
    second = dpo_step(policy.model, policy.tokenizer, [row], settings, 0.5, tmp_path / "r1")
    # TRL logs the margin of the step's forward, before its update: policy == reference
    assert abs(first["reward_margin"]) < 1e-3
    assert abs(second["reward_margin"]) < 1e-3


def test_a_round_of_long_pairs_trains_through_gradient_checkpointing_then_drops_it(
    policy: Policy, tmp_path: Path
) -> None:
    prompt, yes, row = pair(policy)
    before = policy.completion_logprobs(prompt, yes)
    settings = DPOSettings(
        precision="fp32", learning_rate=1e-3, micro_batch=1, batch_pairs=1,
        checkpoint_above_tokens=1,  # every pair counts as long
    )  # fmt: skip
    metrics = dpo_step(policy.model, policy.tokenizer, [row], settings, 0.1, tmp_path)
    assert metrics["gradient_checkpointing"] == 1
    assert not policy.model.is_gradient_checkpointing  # GRPO, swaps and probes run without
    # gradients reached the adapter through the recomputed layers: 'yes' became more likely
    assert sum(policy.completion_logprobs(prompt, yes)) > sum(before)
