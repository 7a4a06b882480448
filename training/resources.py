"""The live objects of a training run in this process: store, endpoint, policy, weight
sync, the algorithm's own live objects, metrics writers.

They reach the loop graph's nodes through its runtime context (`LoopContext`), never a
module-global registry. What resuming a run needs — policy version, what the server
serves, the probe, the algorithm's progress — lives in the graph's checkpointed state
instead; after a restart these objects are rebuilt from disk at the checkpoint's
versions (`training/run.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seal_graph.serving import ModelEndpoint, ModelServer
from seal_graph.store import TraceStore
from seal_graph.training.config import TrainConfig
from seal_graph.training.console import console
from seal_graph.training.policy import Policy
from seal_graph.training.replicas import Replica, Replicas
from seal_graph.training.weight_sync import WeightSync, probe_check

if TYPE_CHECKING:
    from seal_graph.training.algorithms import Algorithm


@dataclass
class LoopRun:
    """Everything the loop's nodes use that cannot live in checkpointed state."""

    run_dir: Path
    run_id: str
    config: TrainConfig
    replicas: Replicas
    store: TraceStore
    policy: Policy
    algorithm: Algorithm
    writer: Any = None

    @property
    def endpoint(self) -> ModelEndpoint:
        """The primary server (agents beside the policy, as the failure agent, live there)."""
        return self.replicas.primary.sync.endpoint

    @property
    def sync(self) -> WeightSync:
        """The primary server's weight sync (its probe check is every replica's)."""
        return self.replicas.primary.sync

    def adapter_dir(self, version: int) -> Path:
        return self.run_dir / "adapters" / f"step-{version}"

    def load_policy(self, version: int) -> None:
        """Put the saved adapter of optimiser step `version` into the policy."""
        if version == self.policy.version:
            return
        if version == 0:
            raise ValueError("step 0 is the fresh adapter; it is never reloaded")
        self.policy.load_adapter(self.adapter_dir(version))
        self.policy.version = version

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
        """After the primary server restarted: load what it served before (every agent)."""
        self.sync.restore()
        self.algorithm.restore_served_weights()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.replicas.close()
        self.algorithm.close()
        self.store.close()


def _flat(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def open_run(
    run_dir: Path,
    run_id: str,
    config: TrainConfig,
    endpoints: ModelEndpoint | list[ModelEndpoint],
    base_dir: Path,
    policy_version: int = 0,
    server_dtype: str | None = None,
    servers: list[ModelServer | None] | None = None,
) -> LoopRun:
    """Build (or rebuild after a restart) the run's live objects, the policy at
    `policy_version`, for one server or several serving the same policy (`servers`: the
    processes the run started, None for one attached by URL); the swap probe's check
    follows `server_dtype` (None: unknown) unless the config sets one."""
    from seal_graph.training.algorithms import algorithm_for

    run_dir.mkdir(parents=True, exist_ok=True)
    endpoints = endpoints if isinstance(endpoints, list) else [endpoints]
    check = probe_check(server_dtype, config.swap_tolerance)
    replicas = []
    for endpoint, server in zip(endpoints, servers or [None] * len(endpoints), strict=True):
        sync = WeightSync(endpoint, config.swap, check)
        if config.swap == "full":
            sync.current = base_dir
        replicas.append(Replica(sync, server))
    run = LoopRun(
        run_dir=run_dir,
        run_id=run_id,
        config=config,
        replicas=Replicas(replicas),
        store=TraceStore(run_dir / "traces.sqlite"),
        policy=Policy(base_dir, config.lora),
        algorithm=algorithm_for(config),
    )
    if policy_version > 0:
        run.load_policy(policy_version)
        console.print(f"[bold]seal-graph[/]: resumed the policy at step {policy_version}")
    return run
