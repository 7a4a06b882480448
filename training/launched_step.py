"""One GRPO step in separate processes, under `accelerate launch` (multi-GPU, DeepSpeed).

By default the loop trains in its own process. With `launcher` set in the config, e.g.
`launcher = ["accelerate", "launch", "--config_file", "examples/accelerate/multi_gpu.yaml"]`,
the train stage writes a job directory (the rows, the current adapter, the previous
step's optimiser state) and runs `python -m seal_graph.training.launched_step JOB_DIR`
under that launcher. Every rank reads the same rows; TRL's trainer (an accelerate
Trainer) shards them over the ranks and all-reduces the gradients; the main process
writes the new adapter, the optimiser state and the step's metrics back into the job
directory, and the loop loads the adapter into its own policy before the swap.

The optimiser state travels as one `torch.save` file: right for DDP, where every rank
holds the full state. DeepSpeed ZeRO shards it, so under ZeRO each step starts fresh
Adam moments (the job's metrics say `optimizer_state_loaded: 0`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import deque
from pathlib import Path

import torch
from pydantic import BaseModel

from seal_graph.errors import SealGraphError
from seal_graph.records import TrainingSample
from seal_graph.training.grpo import OptimConfig, grpo_step
from seal_graph.training.policy import LoraSettings, Policy


class StepJob(BaseModel):
    """What the launched processes need besides the rows."""

    base_dir: Path
    lora: LoraSettings
    optim: OptimConfig


class LaunchedStepError(SealGraphError):
    """The launched training step failed."""


def write_job(job_dir: Path, job: StepJob, rows: list[TrainingSample], policy: Policy) -> None:
    """Job directory: job.json, rows.jsonl, the current adapter (adapter_in/) and the
    policy's KL reference if it keeps one (adapter_ref/)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "job.json").write_text(job.model_dump_json(indent=2), encoding="utf-8")
    with (job_dir / "rows.jsonl").open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(row.model_dump_json() + "\n")
    policy.save_adapter(job_dir / "adapter_in")
    shutil.rmtree(job_dir / "adapter_ref", ignore_errors=True)
    policy.save_reference(job_dir / "adapter_ref")
    (job_dir / "metrics.json").unlink(missing_ok=True)


def run_job(job_dir: Path, launcher: list[str], log_path: Path) -> dict[str, float]:
    """Run the step under `launcher`; its output goes to `log_path`. Returns its metrics."""
    command = [*(launcher or [sys.executable]), "-m", "seal_graph.training.launched_step"]
    command.append(str(job_dir))
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
    metrics_file = job_dir / "metrics.json"
    if result.returncode != 0 or not metrics_file.is_file():
        with log_path.open(encoding="utf-8", errors="replace") as log:
            tail = "".join(deque(log, maxlen=30))
        raise LaunchedStepError(
            f"the launched training step exited with {result.returncode}: "
            f"{' '.join(command)}\nlast lines of {log_path}:\n{tail}\n"
            "Check the launcher and its config file; run the command above by hand to debug."
        )
    return json.loads(metrics_file.read_text("utf-8"))


def load_result(job_dir: Path, policy: Policy) -> None:
    """Put the step's new adapter weights into the loop's in-memory policy."""
    policy.load_adapter(job_dir / "adapter_out")


def main(job_dir: Path) -> None:
    """The body every launched rank runs."""
    job = StepJob.model_validate_json((job_dir / "job.json").read_text("utf-8"))
    policy = Policy(job.base_dir, job.lora)
    policy.load_adapter(job_dir / "adapter_in")
    if (job_dir / "adapter_ref").is_dir():
        policy.keep_reference(job_dir / "adapter_ref")
    with (job_dir / "rows.jsonl").open(encoding="utf-8") as handle:
        rows = [TrainingSample.model_validate_json(line) for line in handle]
    optimizer_file = job_dir / "optimizer.pt"
    had_state = optimizer_file.is_file()
    trainer, metrics = grpo_step(
        policy.model, policy.tokenizer, rows, job.optim, job_dir / "trainer", None, optimizer_file
    )
    if trainer is None:  # no row carried a policy gradient: nothing to step
        _write_metrics(job_dir, metrics)
        return
    if not trainer.accelerator.is_main_process:
        return
    policy.save_adapter(job_dir / "adapter_out")
    loaded = had_state and trainer.initial_optimizer_state is None
    if not trainer.is_deepspeed_enabled:
        torch.save(trainer.optimizer.state_dict(), optimizer_file)
    world = float(trainer.accelerator.num_processes)
    _write_metrics(
        job_dir, {**metrics, "world_size": world, "optimizer_state_loaded": float(loaded)}
    )


def _write_metrics(job_dir: Path, metrics: dict[str, float]) -> None:
    staging = job_dir / "metrics.json.tmp"
    staging.write_text(json.dumps(metrics), encoding="utf-8")
    staging.replace(job_dir / "metrics.json")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
