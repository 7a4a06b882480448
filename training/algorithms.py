"""Training algorithms behind one interface: the loop graph calls these hooks and never
branches on an algorithm's name.

An `Algorithm` owns what differs between algorithms: how an iteration's labelled batch
becomes an optimiser step, which extra agents it serves and rolls out (coevolve-dpo's
failure agent), and what of its progress must survive a restart. That progress is a
plain dict the loop keeps in its checkpointed state (`algorithm` there); the live
objects (a trainer, a second policy) stay in the instance and are rebuilt from that
dict after a restart. To add an algorithm: subclass `Algorithm`, implement `train`, and
name it in `ALGORITHMS`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from seal_graph.evolution import Labelled
from seal_graph.interface import InterfaceVersion
from seal_graph.records import Episode, TrainingSample
from seal_graph.training.advantages import (
    WeightedAdvantages,
    key_statistics,
    update_rho,
    weighted_advantages,
)
from seal_graph.training.config import TrainConfig
from seal_graph.training.console import console
from seal_graph.training.loop import category_lookup, mean
from seal_graph.training.report import diagnosis_weight_section, training_step_section
from seal_graph.training.resources import LoopRun
from seal_graph.training.trajectories import served_trajectory
from seal_graph.training.weight_sync import Probe


class TrainResult(BaseModel):
    """One train stage: its metrics, and the progress it made."""

    metrics: dict[str, Any]
    stepped: bool = Field(description="The policy took an optimiser step (a new version).")
    probe: Probe | None = Field(default=None, description="A served call to verify the swap.")
    state: dict[str, Any] = Field(default_factory=dict, description="The algorithm's progress.")


class Algorithm:
    """The hooks of one training algorithm (defaults: nothing beyond the target agent)."""

    def __init__(self, config: TrainConfig) -> None:
        self.config = config

    def initial_state(self) -> dict[str, Any]:
        """The algorithm's progress before the first iteration."""
        return {}

    def open(self, run: LoopRun, state: dict[str, Any]) -> None:
        """Rebuild live objects from `state` once the server serves the policy."""

    def after_warm_start(
        self, run: LoopRun, state: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Called after the supervised warm start: (metrics, state updates)."""
        return {}, {}

    def rollout(
        self, run: LoopRun, iteration: int, interface: InterfaceVersion, state: dict[str, Any]
    ) -> dict[str, Any]:
        """Rollouts beyond the target's batch; returns metrics to add to the stage."""
        return {}

    def train(
        self, run: LoopRun, iteration: int, pairs: Labelled, state: dict[str, Any]
    ) -> TrainResult:
        raise NotImplementedError

    def swap(
        self, run: LoopRun, state: dict[str, Any], probe: Probe | None
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """Serve the algorithm's other agents' new weights: (metrics or None, updates)."""
        return None, {}

    def report_sections(self, history: list[dict[str, Any]]) -> list[str]:
        """Markdown lines the end-of-run report adds for this algorithm."""
        return []

    def restore_served_weights(self) -> None:
        """After a server restart: serve the other agents' weights again."""

    def close(self) -> None:
        """Release live objects."""


class GRPO(Algorithm):
    """Diagnosis-weighted GRPO (`seal`; `vanilla-grpo` with weighting and adaptation off):
    group-relative advantages, reweighted by the turns' labels, one optimiser step over
    the batch's served LLM calls. Its state: the dynamic rho and the optimiser state file."""

    def __init__(self, config: TrainConfig) -> None:
        super().__init__(config)
        self.trainer: Any = None  # TRL's trainer, kept across iterations (Adam moments)

    def initial_state(self) -> dict[str, Any]:
        return {"rho": dict(self.config.weighting.rho), "optimizer_state": None}

    def after_warm_start(
        self, run: LoopRun, state: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """With a KL term, RL's reference is the warm start, not the untrained model."""
        if not self.config.optim.beta:
            return {}, {}
        run.policy.keep_reference()
        return {}, {"reference_version": run.policy.version}

    def open(self, run: LoopRun, state: dict[str, Any]) -> None:
        """After a restart: the warm start kept as the KL reference again."""
        if state.get("reference_version"):
            run.policy.keep_reference(run.adapter_dir(state["reference_version"]))

    def train(
        self, run: LoopRun, iteration: int, pairs: Labelled, state: dict[str, Any]
    ) -> TrainResult:
        config = run.config
        rho = state["rho"]
        if config.weighting.dynamic_rho and config.ablation.reweighting:
            rho = update_rho(rho, key_statistics(pairs), config.weighting)
        weighted = weighted_advantages(pairs, config.weighting, rho)
        mode = config.weighting_mode
        rows, split, respliced = episode_rows(
            [episode for episode, _ in pairs],
            weighted,
            mode,
            config.optim.whole_episodes,
            run.policy.tokenizer.eos_token_id,
        )
        optimizer_state = state.get("optimizer_state")
        if config.launcher is not None:
            metrics = self._launched_step(run, rows)
        else:
            metrics = self._step(run, rows, Path(optimizer_state) if optimizer_state else None)
        stepped = metrics.get("samples", 0.0) > 0
        probe = None
        if stepped:
            run.policy.version += 1
            run.policy.save_adapter(run.adapter_dir(run.policy.version))
            probe = _probe(rows)
            if self.trainer is not None:
                optimizer_state = str(self._save_optimizer(run))
        return TrainResult(
            metrics={
                "stepped": stepped,
                "samples": int(metrics.get("samples", 0)),
                "loss": metrics.get("train_loss"),
                "groups": weighted.groups,
                "zero_signal_groups": weighted.zero_signal_groups,
                "mean_abs_advantage": mean(abs(a) for a in weighted.advantage.values()),
                "mean_weight": mean(weighted.weight.values()),
                "reweighted_share": mean(abs(w - 1.0) >= 0.2 for w in weighted.weight.values())
                if mode == "trajectory"
                else 0.0,
                "weighting": mode,
                "rho": weighted.rho if mode != "none" else {},
                "moved_advantage": weighted.moved_share(mode, category_lookup(run)),
                "episodes_split_into_calls": split,
                "episodes_respliced": respliced,
                **{k: metrics[k] for k in STEP_STATISTICS if k in metrics},
            },
            stepped=stepped,
            probe=probe,
            state={"rho": rho, "optimizer_state": optimizer_state},
        )

    def report_sections(self, history: list[dict[str, Any]]) -> list[str]:
        return training_step_section(history) + diagnosis_weight_section(history)

    def _step(
        self, run: LoopRun, rows: list[TrainingSample], optimizer_state: Path | None
    ) -> dict[str, float]:
        """The optimiser step in this process; a fresh trainer (after a restart) starts
        from the optimiser state the previous step saved."""
        from seal_graph.training.grpo import grpo_step

        self.trainer, metrics = grpo_step(
            run.policy.model,
            run.policy.tokenizer,
            rows,
            run.config.optim,
            run.run_dir / "trainer",
            self.trainer,
            optimizer_state if self.trainer is None else None,
        )
        return metrics

    def _save_optimizer(self, run: LoopRun) -> Path:
        """The Adam moments after step `run.policy.version`, one file per step (a step
        recomputed after a crash starts from the previous step's file, not its own)."""
        import torch

        path = run.run_dir / "optimizer" / f"step-{run.policy.version}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(self.trainer.optimizer.state_dict(), path)
        for older in path.parent.glob("step-*.pt"):
            if older != path:
                older.unlink()
        return path

    def _launched_step(self, run: LoopRun, rows: list[TrainingSample]) -> dict[str, float]:
        """The optimiser step in separate processes under the configured launcher."""
        from seal_graph.training.launched_step import StepJob, load_result, run_job, write_job

        config = run.config
        job_dir = run.run_dir / "launched-step"
        job = StepJob(base_dir=run.policy.base_dir, lora=config.lora, optim=config.optim)
        write_job(job_dir, job, rows, run.policy)
        console.print(f"training step under: {' '.join(config.launcher or [])}")
        metrics = run_job(job_dir, config.launcher or [], run.run_dir / "launched-step.log")
        if metrics.get("samples", 0.0) > 0:
            load_result(job_dir, run.policy)
        return metrics


STEP_STATISTICS = (
    "calls",
    "optimizer_steps",
    "forwarded_tokens",
    "padding_share",
    "agent_tokens",
    "peak_rss_mb",
    "episodes",
    "episode_tokens",
    "tokens_per_second",
    "mismatch_mean",
    "mismatch_max",
    "tis_truncated_share",
)
"""What the optimiser step reports about its own work (`grpo.grpo_step`)."""


def episode_rows(
    episodes: list[Episode],
    weighted: WeightedAdvantages,
    mode: str,
    whole: bool,
    end_of_turn: int | None = None,
) -> tuple[list[TrainingSample], int, int]:
    """The batch as training samples: each episode one served sequence (`whole`), with
    every agent token carrying its episode's (trajectory mode) or its turn's (turn mode)
    weighted advantage; an episode whose calls do not chain falls back to one sample per
    call. Returns the samples, how many episodes fell back, and how many were kept whole
    by re-splicing a re-rendered agent message (`served_trajectory`)."""
    rows: list[TrainingSample] = []
    split = respliced = 0
    for episode in episodes:
        identity = {
            "episode_id": episode.episode_id,
            "task_id": episode.task_id,
            "sample_index": episode.sample_index,
            "interface_version": episode.interface_version,
            "policy_version": episode.policy_version,
            "reward": episode.reward,
        }
        sequence = served_trajectory(episode, end_of_turn) if whole else None
        if sequence is not None:
            respliced += sequence.respliced > 0
            start = sequence.prompt_length
            agent_turns = {t for t in sequence.turns if t >= 0}
            per_turn = {t: weighted.for_call(episode.episode_id, t, mode) for t in agent_turns}
            turns = sequence.turns[start:]
            rows.append(
                TrainingSample(
                    **identity,
                    turn=turns[0] if turns else 0,
                    prompt_token_ids=sequence.token_ids[:start],
                    completion_token_ids=sequence.token_ids[start:],
                    completion_logprobs=sequence.logprobs[start:],
                    agent_mask=sequence.agent_mask[start:],
                    token_advantages=[per_turn[t] if t >= 0 else 0.0 for t in turns],
                    advantage=max(per_turn.values(), key=abs),
                    calls=sequence.calls,
                )
            )
            continue
        served = [c for c in episode.llm_calls if c.completion_token_ids]
        split += whole and bool(served)
        # With whole episodes in the batch, a call's prompt beyond the episode's first
        # prompt goes into the completion as context (masked out): every sample then has
        # a prompt of about the same length, so length-grouped micro-batches stay dense.
        shared = len(served[0].prompt_token_ids) if whole and served else None
        for index, call in enumerate(episode.llm_calls):
            if not call.completion_token_ids:
                continue
            cut = len(call.prompt_token_ids) if shared is None else shared
            context = call.prompt_token_ids[cut:]
            rows.append(
                TrainingSample(
                    **identity,
                    call_index=index,
                    turn=call.turn,
                    prompt_token_ids=call.prompt_token_ids[:cut],
                    completion_token_ids=context + call.completion_token_ids,
                    completion_logprobs=[0.0] * len(context) + call.completion_logprobs,
                    agent_mask=[0] * len(context) + [1] * len(call.completion_token_ids)
                    if context
                    else [],
                    advantage=weighted.for_call(episode.episode_id, call.turn, mode),
                )
            )
    return rows, split, respliced


def _probe(rows: list[TrainingSample]) -> Probe:
    """A served completion of the row with the largest advantage: its first agent span."""
    row = max(rows, key=lambda r: abs(r.advantage))
    mask = row.agent_mask or [1] * len(row.completion_token_ids)
    start = mask.index(1)
    end = mask.index(0, start) if 0 in mask[start:] else len(mask)
    return Probe(
        prompt_token_ids=row.prompt_token_ids + row.completion_token_ids[:start],
        completion_token_ids=row.completion_token_ids[start:end],
    )


def _dpo(config: TrainConfig) -> Algorithm:
    from seal_graph.training.dpo_loop import HardNegativeDPO

    return HardNegativeDPO(config)


ALGORITHMS: dict[str, Callable[[TrainConfig], Algorithm]] = {
    "seal": GRPO,
    "vanilla-grpo": GRPO,
    "eto": _dpo,
    "coevolve-dpo": _dpo,
}
"""Algorithm name (`TrainConfig.algo`) → factory."""


def algorithm_for(config: TrainConfig) -> Algorithm:
    return ALGORITHMS[config.algo](config)
