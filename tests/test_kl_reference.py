"""The GRPO KL reference after a warm start, on the bundled model: the warm start kept as
a frozen adapter, not the untrained model TRL reads with the adapter switched off."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from served_rows import served_rows

from seal_graph.bundled_model import ensure_bundled_model
from seal_graph.training.algorithms import GRPO
from seal_graph.training.config import load_config
from seal_graph.training.grpo import grpo_step
from seal_graph.training.launched_step import StepJob, write_job
from seal_graph.training.policy import REFERENCE, Policy, reference_weights
from seal_graph.training.settings import LoraSettings, OptimConfig

IDS = torch.tensor([[1, 504, 3150, 314, 216, 1345, 30]])


def _warm_started(policy: Policy, seed: int) -> None:
    """Stand-in for SFT: every LoRA B (zero in a fresh adapter) set to small noise."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in policy.model.named_parameters():
            if "lora_B.default" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)


def _logits(policy: Policy) -> torch.Tensor:
    with torch.no_grad():
        return policy.model(input_ids=IDS).logits


@pytest.fixture
def policy() -> Policy:
    return Policy(ensure_bundled_model(), LoraSettings(r=4, alpha=8))


def test_the_kept_reference_is_the_warm_start_frozen_and_never_saved_as_the_policy(
    policy: Policy, tmp_path
) -> None:
    untrained = _logits(policy)
    _warm_started(policy, seed=0)
    warm = _logits(policy)
    policy.keep_reference()
    _warm_started(policy, seed=1)  # RL moves the policy on
    trained = _logits(policy)
    assert not torch.allclose(warm, trained) and not torch.allclose(warm, untrained)
    with reference_weights(policy.model):
        torch.testing.assert_close(_logits(policy), warm)
    torch.testing.assert_close(_logits(policy), trained)  # the policy is active again
    grads = {n: p.requires_grad for n, p in policy.model.named_parameters() if "lora_" in n}
    assert all(grads[n] for n in grads if ".default." in n)
    assert not any(grads[n] for n in grads if f".{REFERENCE}." in n)

    saved = policy.save_adapter(tmp_path / "adapter")
    assert not (saved / REFERENCE).exists()  # vLLM serves the policy's adapter only
    fresh = Policy(ensure_bundled_model(), LoraSettings(r=4, alpha=8))
    fresh.load_adapter(saved)
    torch.testing.assert_close(_logits(fresh), trained)
    fresh.keep_reference(policy.save_reference(tmp_path / "reference"))  # a launched step
    with reference_weights(fresh.model):
        torch.testing.assert_close(_logits(fresh), warm)


@pytest.mark.parametrize("kept", [True, False], ids=["warm start kept", "adapter off"])
def test_the_first_steps_kl_is_zero_only_against_the_kept_warm_start(
    policy: Policy, tmp_path, kept: bool
) -> None:
    _warm_started(policy, seed=0)
    if kept:
        policy.keep_reference()
    config = OptimConfig(learning_rate=1e-4, beta=0.1, micro_batch=2, precision="fp32")
    trainer, _ = grpo_step(
        policy.model,
        policy.tokenizer,
        served_rows(policy, ["set x to 1", "no idea"], [1.0, -1.0]),
        config,
        tmp_path,
    )
    kl = next(entry["kl"] for entry in trainer.state.log_history if "kl" in entry)
    assert (kl < 1e-6) if kept else (kl > 1e-3)


def test_grpo_keeps_the_warm_start_as_reference_through_a_restart_and_a_launched_step(
    policy: Policy, tmp_path
) -> None:
    config = load_config(None, "cpu", optim={"beta": 0.04})
    run = SimpleNamespace(policy=policy, adapter_dir=lambda v: tmp_path / f"step-{v}")
    _warm_started(policy, seed=0)
    policy.version = 1
    policy.save_adapter(run.adapter_dir(1))  # what the loop's warm start leaves
    warm = _logits(policy)
    _, updates = GRPO(config).after_warm_start(run, {})
    assert updates == {"reference_version": 1}

    restarted = Policy(ensure_bundled_model(), LoraSettings(r=4, alpha=8))
    GRPO(config).open(SimpleNamespace(policy=restarted, adapter_dir=run.adapter_dir), updates)
    write_job(
        tmp_path / "job",
        StepJob(base_dir=tmp_path, lora=config.lora, optim=config.optim),
        [],
        restarted,
    )
    launched = Policy(ensure_bundled_model(), LoraSettings(r=4, alpha=8))
    launched.keep_reference(tmp_path / "job" / "adapter_ref")
    with reference_weights(launched.model):
        torch.testing.assert_close(_logits(launched), warm)

    without_kl = load_config(None, "cpu")
    assert GRPO(without_kl).after_warm_start(run, {}) == ({}, {})
