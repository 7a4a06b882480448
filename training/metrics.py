"""What one loop iteration measured, stage by stage: the typed record the loop writes
(`metrics.jsonl`, the graph's `history`) and the report and the benchmarks read.

Stage records allow extra fields, so an algorithm can add its own numbers; the ones
listed here are what the report, the plots and `benchmarks/learning.py` rely on.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Stage(BaseModel):
    model_config = ConfigDict(extra="allow")

    seconds: float = Field(
        default=0.0,
        description="The stage's own measure: its wall time, except a swap's (from the "
        "load request to the verified answer, the figure swaps are judged by).",
    )
    wall_seconds: float | None = Field(
        default=None,
        description="The whole stage as the loop ran it (a swap's checkpoint writing and "
        "probe referencing, a failure agent's rollouts, the final extra splits included); "
        "None in records written before it was kept.",
    )


class FailureAgentRollout(_Stage):
    """coevolve-dpo: the failure agent's batch."""

    episodes: int = 0
    success: float = 0.0
    mean_failure_progress: float = 0.0


Rates = dict[str, dict[str, float | int | None]]
"""`seal_graph.abstention.abstention_rates`: per category (and `all`), the call rate on
turns that need a call, the no-call rate on abstention turns, the share of abstention
replies naming what is missing, and their turn counts."""


class RolloutMetrics(_Stage):
    episodes: int = 0
    train_success: float = Field(default=0.0, description="Success of the training batch.")
    train_reward: float = 0.0
    mixed_groups: dict[str, float] = Field(
        default_factory=dict,
        description="Per category (and `all`), the share of task groups whose rewards "
        "differ: the groups GRPO learns from.",
    )
    abstention: Rates = Field(default_factory=dict, description="In the training batch.")
    rollout_failures: int = Field(default=0, description="Episodes lost to infrastructure.")
    requests_in_flight: float | None = Field(
        default=None, description="Mean model requests in flight (of rollout.concurrency)."
    )
    failure_agent: FailureAgentRollout | None = None


class DiagnoseMetrics(_Stage):
    label_prevalence: dict[str, float] = Field(default_factory=dict)
    label_counts: dict[str, int] = Field(default_factory=dict)
    tag_counts: dict[str, int] = Field(
        default_factory=dict,
        description="Turns per weighting key (the paper's per-turn tag, else the label): "
        "what rho acts on.",
    )


class EvolveMetrics(_Stage):
    version: int = Field(default=0, description="Interface version after the stage.")
    change: str = ""


class DPORound(BaseModel):
    """One DPO round (the target's or the failure agent's)."""

    model_config = ConfigDict(extra="allow")

    pairs: float = 0.0
    optimizer_steps: float | None = None
    beta: float | None = None
    train_loss: float | None = None
    reward_margin: float | None = None
    reward_accuracy: float | None = None
    seconds: float = 0.0


class NegativeStatistics(BaseModel):
    """How hard an iteration's negatives were (partial progress; 1 = success)."""

    count: float = 0.0
    mean_progress: float = 0.0
    best_progress: float = 0.0
    near_success: float = 0.0


class TrainMetrics(_Stage):
    """GRPO fills the advantage statistics; the DPO algorithms fill the rounds."""

    stepped: bool = False
    samples: int = 0
    loss: float | None = None
    groups: int = 0
    zero_signal_groups: int = 0
    mean_abs_advantage: float = 0.0
    mean_weight: float = 1.0
    reweighted_share: float = Field(
        default=0.0,
        description="Share of trajectories whose diagnosis weight differs from 1 by 0.2 "
        "or more (trajectory weighting): how much SEAL's reweighting acted.",
    )
    weighting: str | None = None
    rho: dict[str, float] = Field(
        default_factory=dict,
        description="rho(z) per weighting key as this step used it (diagnosis-weighted "
        "GRPO only): how dynamic rho moved the labels' weights.",
    )
    moved_advantage: dict[str, float] = Field(
        default_factory=dict,
        description="Per category and over all (`all`): the share of the batch's advantage "
        "mass sum|A| the diagnosis weights moved, sum|A~ - A| / sum|A| (0 without "
        "reweighting; a category without signal is absent).",
    )
    negatives: NegativeStatistics | None = None
    target: DPORound | None = None
    failure_agent: DPORound | None = None


class SwapMetrics(_Stage):
    version: str | None = Field(default=None, description="The policy version swapped in.")
    ok: bool = True
    load_seconds: float | None = None
    """Of the swap's seconds, loading the weights; the rest is the probe's answer."""
    max_logprob_diff: float | None = None
    mean_logprob_diff: float | None = None
    probe_change: float | None = None
    """Mean gap between the weights served before the swap and the new policy: what a
    stale swap would show (the probe detects it when this exceeds the tolerance)."""
    rolled_back: bool = False
    error: str | None = None


class SplitResult(_Stage):
    """An evaluation of one split: greedy and (if asked) sampled success, each with its
    95% bootstrap interval over tasks, and the outcome of every task."""

    success: float = Field(default=0.0, description="Greedy success (base interface).")
    episodes: int = 0
    ci: tuple[float, float] | None = Field(default=None, description="95% interval.")
    per_task: dict[str, float] = Field(
        default_factory=dict, description="Greedy outcome per task id (0 or 1)."
    )
    sampled_success: float | None = Field(
        default=None, description="Mean success of `eval.samples` episodes per task."
    )
    sampled_ci: tuple[float, float] | None = None
    sampled_per_task: dict[str, float] = Field(default_factory=dict)
    abstention: Rates = Field(default_factory=dict, description="Of the greedy episodes.")


class EvaluateMetrics(SplitResult):
    splits: dict[str, SplitResult] = Field(
        default_factory=dict, description="The final extra splits (last iteration)."
    )


class IterationMetrics(BaseModel):
    """One finished iteration."""

    iteration: int = Field(
        description="The iteration's number, from 1 (as the console, the report and the "
        "store's batch ids `RUN/itN` number it)."
    )
    policy_version: int = Field(description="Policy version served at the iteration's end.")
    interface_version: int
    rollout: RolloutMetrics = Field(default_factory=RolloutMetrics)
    diagnose: DiagnoseMetrics = Field(default_factory=DiagnoseMetrics)
    evolve: EvolveMetrics = Field(default_factory=EvolveMetrics)
    train: TrainMetrics = Field(default_factory=TrainMetrics)
    swap: SwapMetrics = Field(default_factory=SwapMetrics)
    evaluate: EvaluateMetrics | None = Field(
        default=None, description="None in iterations without an evaluation."
    )

    def stage_seconds(self, stage: str) -> float:
        """The stage's whole wall time (its own measure in older records)."""
        record = getattr(self, stage)
        if record is None:
            return 0.0
        return record.wall_seconds if record.wall_seconds is not None else record.seconds


def history_of(records: list[dict[str, Any]]) -> list[IterationMetrics]:
    """A run's history (the graph output's `history`, or metrics.jsonl rows), typed."""
    return [IterationMetrics.model_validate(r) for r in records]
