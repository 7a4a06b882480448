"""After a bf16-autocast training round the policy computes logprobs in float32 again
(accelerate leaves an autocast wrapper on `forward`; swap probes would then disagree with
the float32 server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from seal_graph.bundled_model import ensure_bundled_model
from seal_graph.training.dpo import DPOSettings, dpo_step
from seal_graph.training.policy import LoraSettings, Policy
from seal_graph.training.sft import use_bf16


@pytest.mark.skipif(not use_bf16("auto"), reason="no bf16 kernels on this CPU")
def test_dpo_round_in_bf16_leaves_the_policy_in_float32(tmp_path: Path) -> None:
    policy = Policy(ensure_bundled_model(), LoraSettings(r=4, alpha=8))
    prompt = policy.tokenizer("Is fire hot?", add_special_tokens=False)["input_ids"]
    yes = policy.tokenizer(" yes<|im_end|>", add_special_tokens=False)["input_ids"]
    no = policy.tokenizer(" no<|im_end|>", add_special_tokens=False)["input_ids"]
    before = policy.completion_logprobs(prompt, yes)
    row = {
        "prompt_ids": prompt,
        "chosen_ids": yes,
        "rejected_ids": no,
        "chosen_mask": [1] * len(yes),
        "rejected_mask": [1] * len(no),
    }
    settings = DPOSettings(precision="bf16", learning_rate=1e-9, micro_batch=1, batch_pairs=1)
    metrics = dpo_step(policy.model, policy.tokenizer, [row], settings, 0.1, tmp_path)
    assert metrics["pairs"] == 1
    assert "_original_forward" not in policy.model.__dict__
    after = policy.completion_logprobs(prompt, yes)
    # lr 1e-9 leaves the weights as they were: float32 logprobs agree to float32 noise
    assert max(abs(a - b) for a, b in zip(before, after, strict=True)) < 1e-4
