"""The settings of each training algorithm and of the adapter, free of heavy imports.

They live apart from the modules that use them (`grpo.py`, `dpo.py`, `sft.py`,
`policy.py`, which import torch, TRL and PEFT), so that a run's config validates — and
`seal-graph train --config` fails fast on a bad file — without loading a training stack.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Precision = Literal["auto", "fp32", "bf16"]


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: The paper's default rho; labels not listed weigh 1.0.
DEFAULT_RHO: dict[str, float] = {
    "spurious_tool_call": 2.0,
    "correct_abstention": 1.8,
    "empty_turn_model_response": 1.5,
    "state_mismatch": 1.0,
    "pass": 1.0,
    "response_mismatch": 0.9,
    "instance_mismatch": 0.6,
}


class WeightingConfig(_Settings):
    """How diagnoses reweight advantages."""

    mode: Literal["none", "trajectory", "turn"] = Field(
        default="trajectory", description="none = vanilla GRPO advantages."
    )
    rho: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_RHO),
        description="rho(z): weight per failure label or verifier tag (unlisted: 1.0).",
    )
    w_min: float = Field(default=0.5, gt=0, description="Lower clip of a weight.")
    w_max: float = Field(default=2.0, gt=0, description="Upper clip of a weight.")
    dynamic_rho: bool = Field(default=True, description="Adapt rho online (EMA).")
    alpha: float = Field(default=1.0, ge=0, description="Strength of dynamic rho.")
    ema_beta: float = Field(default=0.25, gt=0, le=1, description="EMA rate of dynamic rho.")
    count_saturation: int = Field(
        default=32, ge=1, description="Label count at which dynamic rho moves at full strength."
    )
    eps: float = Field(default=1e-6, gt=0, description="Added to the group std.")
    reward: Literal["success", "progress"] = Field(
        default="success",
        description="What a group's advantages are computed from. success = the paper's "
        "binary verifier reward. progress (beyond the paper) = the share of the task's "
        "user turns the verifier passed (1 on success): an abstention turn handled right "
        "earns credit even when a later turn fails. The paper saw partial credit pull "
        "GRPO towards always abstaining; choose it on `val` only.",
    )

    @model_validator(mode="after")
    def _clip_range(self) -> WeightingConfig:
        if self.w_min > self.w_max:
            raise ValueError(
                f"weighting.w_min={self.w_min} is above weighting.w_max={self.w_max}: "
                "the clip range is empty"
            )
        return self


class OptimConfig(_Settings):
    """Optimiser settings of one GRPO step."""

    learning_rate: float = Field(default=1e-6, gt=0, description="AdamW learning rate.")
    beta: float = Field(
        default=0.001,
        ge=0,
        description="KL coefficient (0 = no reference). The reference is RL's starting "
        "point: the warm start when there is one, else the served model.",
    )
    epsilon: float = Field(default=0.2, gt=0, description="Clip range of the ratio.")
    epochs: int = Field(default=1, ge=1, description="Passes over a batch.")
    micro_batch: int = Field(
        default=2,
        ge=1,
        description="Pairs of samples per micro-batch (TRL takes them two by two): the "
        "rows whose activations are held together until the backward pass.",
    )
    micro_batch_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Bound on a micro-batch's tokens: each step uses as many pairs (up to "
        "`micro_batch`) as fit, counted at the step's longest sample, never fewer than "
        "one. What bounds the trainer's memory: it grows with the tokens held at once.",
    )
    loss_type: str = Field(default="grpo", description="TRL's loss aggregation (`loss_type`).")
    max_grad_norm: float = Field(default=1.0, gt=0, description="Gradient clipping norm.")
    drop_zero_advantage: bool = Field(
        default=True,
        description="Skip samples whose advantage is 0 (no policy gradient) when beta = 0.",
    )
    max_samples: int | None = Field(
        default=None,
        ge=1,
        description="Cap on samples per iteration (a seeded random subset: episodes, or "
        "LLM calls of episodes that could not be one sequence); keeps a CPU step short.",
    )
    whole_episodes: bool = Field(
        default=True,
        description="Train on each episode as one served sequence (prompt forwarded once); "
        "False = one sample per LLM call.",
    )
    mini_batches: int = Field(
        default=1,
        ge=1,
        description="Optimiser steps per epoch over the iteration's samples (PPO-style: "
        "later mini-batches are corrected by the clipped ratio to the policy before the "
        "step).",
    )
    precision: Precision = Field(
        default="auto",
        description="auto = bf16 autocast where the hardware has bf16 kernels (as the warm "
        "start and DPO), else fp32; the swap probe is computed in fp32 either way.",
    )
    tis_cap: float = Field(
        default=2.0,
        ge=1.0,
        description="Truncated importance sampling: each agent token's loss is weighted by "
        "min(pi_trainer / pi_served, tis_cap), correcting for the serving engine computing "
        "slightly different probabilities than the trainer (bf16 server, other kernels).",
    )


class LoraSettings(_Settings):
    """The adapter being trained."""

    r: int = Field(default=16, ge=1, description="LoRA rank (vLLM serves ranks up to 128).")
    alpha: int = Field(default=32, ge=1, description="LoRA scaling alpha.")
    dropout: float = Field(default=0.0, ge=0, lt=1, description="LoRA dropout.")
    target_modules: list[str] = Field(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
        description="Modules that get an adapter.",
    )


class WarmStartSettings(_Settings):
    """A supervised warm start on reference trajectories, in whole epochs (0 = none)."""

    epochs: int = Field(
        default=0,
        ge=0,
        description="Passes over every expert sequence, each in a fresh random order "
        "(0 = no warm start).",
    )
    batch_size: int = Field(default=4, ge=1, description="Examples per SFT step.")
    learning_rate: float = Field(default=2e-4, gt=0, description="SFT learning rate.")
    split: str = Field(default="train", description="Split whose reference solutions teach.")
    tasks_per_category: int | None = Field(
        default=None,
        ge=1,
        description="A smaller reference set: this many tasks of each category "
        "(`metadata['category']`); None = every task of the split.",
    )
    precision: Precision = Field(
        default="auto",
        description="auto = bf16 autocast where the hardware has bf16 "
        "kernels (1.8x faster measured on this CPU), else fp32.",
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        """A config written for the step-counted warm start says what replaced it."""
        if isinstance(data, dict) and {"steps", "tasks"} & set(data):
            raise ValueError(
                "warm_start.steps and warm_start.tasks were replaced: the warm start trains "
                "whole epochs over every expert sequence. Use warm_start.epochs (passes) "
                "and warm_start.tasks_per_category (a smaller, stratified reference set)."
            )
        return data


class DPOSettings(_Settings):
    """Preference optimisation of the target (and the failure agent)."""

    beta_first: float = Field(default=0.1, gt=0, description="DPO beta in the first iteration.")
    beta_later: float = Field(default=0.5, gt=0, description="DPO beta afterwards.")
    learning_rate: float = Field(default=1e-5, gt=0, description="DPO learning rate.")
    epochs: int = Field(default=1, ge=1, description="Passes over an iteration's pairs.")
    batch_pairs: int = Field(default=8, ge=1, description="Pairs per optimiser step.")
    micro_batch: int = Field(
        default=1,
        ge=1,
        description="Pairs per forward pass. A pair is two whole trajectories (chosen and "
        "rejected, ~1-2.5k tokens each on kv-calc) and activations take ~2 MB per token on "
        "the bundled model under bf16 autocast (measured: 7.4k tokens in one forward+backward "
        "peaked at 15-16 GB), so 1 keeps a round's memory beside a vLLM server on 24 GB.",
    )
    checkpoint_above_tokens: int | None = Field(
        default=6000,
        ge=1,
        description="Gradient checkpointing (each layer's activations recomputed in the "
        "backward) for a round whose micro-batches can hold more than this many tokens. "
        "A BFCL pair is ~10k tokens: a LoRA forward+backward of 2 x 4.9k tokens peaked at "
        "14.4 GB without it (a whole ETO round beside a vLLM server was OOM-killed at 20 GB "
        "on 24 GB), 5.3 GB with it, 16% slower (one measurement each). kv-calc pairs stay "
        "under it. None: never.",
    )
    max_pairs: int | None = Field(
        default=16, ge=1, description="Cap on pairs per iteration (a seeded sample)."
    )
    failure_group_size: int = Field(
        default=4, ge=1, description="Failure-agent rollouts per task (coevolve-dpo)."
    )
    expert_chosen: bool = Field(
        default=True,
        description="The chosen side of a task's pairs is its expert trajectory (its "
        "reference solution replayed) where it has one; False: only the agent's own "
        "successes, so the gain cannot come from more expert sequences.",
    )
    failure_pairs_per_task: int = Field(
        default=4, ge=1, description="Failure-agent preference pairs per task (coevolve-dpo)."
    )
    precision: Precision = Field(
        default="auto",
        description="auto = bf16 autocast where the hardware has bf16 kernels (as the warm "
        "start); the reference is computed under the same precision as the policy.",
    )

    def beta(self, iteration: int) -> float:
        return self.beta_first if iteration == 0 else self.beta_later
