"""The live objects of a training run in this process: store, endpoint, policy, trainer,
weight sync, metrics writers.

The loop graph's state holds only serialisable progress (iteration, versions, interface,
history); its nodes find these objects here by run directory. After a restart they are
rebuilt from disk: the policy reloads the adapter of the last completed optimiser step
and the server is brought to those weights before anything is rolled out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peft import set_peft_model_state_dict
from rich.console import Console
from safetensors.torch import load_file

from seal_graph.serving import ModelEndpoint
from seal_graph.store import TraceStore
from seal_graph.training.config import TrainConfig
from seal_graph.training.grpo import TraceGRPOTrainer
from seal_graph.training.policy import Policy
from seal_graph.training.weight_sync import Probe, WeightSync

console = Console(stderr=True)


@dataclass
class LoopResources:
    """Everything the loop's nodes use that cannot live in checkpointed state."""

    run_dir: Path
    run_id: str
    config: TrainConfig
    endpoint: ModelEndpoint
    store: TraceStore
    policy: Policy
    sync: WeightSync
    trainer: TraceGRPOTrainer | None = None
    writer: Any = None
    probe: Probe | None = None
    failure: Policy | None = None
    """coevolve-dpo's failure agent (`training/dpo_loop.py`)."""
    failure_sync: WeightSync | None = None
    failure_served: int = -1

    def adapter_dir(self, version: int) -> Path:
        return self.run_dir / "adapters" / f"step-{version}"

    def weights_for(self, version: int) -> Path:
        """What the server loads for a policy version (adapter or merged checkpoint)."""
        if self.config.swap == "lora":
            return self.policy.save_adapter(self.adapter_dir(version))
        if version == 0:
            return self.policy.base_dir
        # One directory per version: a failed swap rolls back to the previous one, which
        # must still be on disk (`loop.swap` deletes the superseded ones).
        return self.policy.save_merged(self.run_dir / "merged" / f"step-{version}")

    def log_metrics(self, metrics: dict[str, Any]) -> None:
        """Append to metrics.jsonl and TensorBoard."""
        with (self.run_dir / "metrics.jsonl").open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(metrics, default=float) + "\n")
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(self.run_dir / "tensorboard"))
        step = metrics["iteration"]
        for key, value in _flat(metrics).items():
            if isinstance(value, int | float):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def restore_served_weights(self) -> None:
        """After the server restarted: load what it served before (policy, failure agent)."""
        self.sync.restore()
        if self.failure_sync is not None:
            self.failure_sync.restore()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.sync.close()
        if self.failure_sync is not None:
            self.failure_sync.close()
        self.store.close()


def _flat(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


_LIVE: dict[str, LoopResources] = {}


def open_resources(
    run_dir: Path,
    run_id: str,
    config: TrainConfig,
    endpoint: ModelEndpoint,
    base_dir: Path,
    policy_version: int,
) -> LoopResources:
    """Build (or rebuild after a restart) the run's live objects at `policy_version`."""
    run_dir.mkdir(parents=True, exist_ok=True)
    policy = Policy(base_dir, config.lora)
    if policy_version > 0:
        weights = load_file(str(_adapter_file(run_dir, policy_version)))
        set_peft_model_state_dict(policy.model, weights)
        policy.version = policy_version
        console.print(f"[bold]seal-graph[/]: resumed the policy at step {policy_version}")
    sync = WeightSync(endpoint, config.swap, tolerance=config.swap_tolerance)
    if config.swap == "full":
        sync.current = base_dir
    resources = LoopResources(
        run_dir=run_dir,
        run_id=run_id,
        config=config,
        endpoint=endpoint,
        store=TraceStore(run_dir / "traces.sqlite"),
        policy=policy,
        sync=sync,
    )
    _LIVE[str(run_dir)] = resources
    return resources


def _adapter_file(run_dir: Path, version: int) -> Path:
    return run_dir / "adapters" / f"step-{version}" / "adapter_model.safetensors"


def resources_for(run_dir: str) -> LoopResources:
    try:
        return _LIVE[run_dir]
    except KeyError:
        raise RuntimeError(
            f"no live resources for run {run_dir}: call open_resources() before the loop "
            "graph (seal-graph train does)"
        ) from None
