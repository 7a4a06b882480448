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
from seal_graph.records import TrainingSample
from seal_graph.training.config import TrainConfig
from seal_graph.training.loop import batch_run_id, mean
from seal_graph.training.resources import LoopRun, console
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

    def train(
        self, run: LoopRun, iteration: int, pairs: Labelled, state: dict[str, Any]
    ) -> TrainResult:
        from seal_graph.training.advantages import key_statistics, update_rho, weighted_advantages

        config = run.config
        rho = state["rho"]
        if config.weighting.dynamic_rho and config.ablation.reweighting:
            rho = update_rho(rho, key_statistics(pairs), config.weighting)
        weighted = weighted_advantages(pairs, config.weighting, rho)
        mode = config.weighting_mode
        rows = [
            sample.model_copy(
                update={"advantage": weighted.for_call(sample.episode_id, sample.turn, mode)}
            )
            for sample in run.store.training_samples(batch_run_id(run, iteration))
            if sample.completion_token_ids
        ]
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
                "weighting": mode,
            },
            stepped=stepped,
            probe=probe,
            state={"rho": rho, "optimizer_state": optimizer_state},
        )

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


def _probe(rows: list[TrainingSample]) -> Probe:
    row = max(rows, key=lambda r: abs(r.advantage))
    return Probe(
        prompt_token_ids=row.prompt_token_ids, completion_token_ids=row.completion_token_ids
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
