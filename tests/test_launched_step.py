"""The scale-out training path: one GRPO step under a distributed launcher.

This machine has no GPU, so the two-rank case runs DDP over gloo on CPU with torchrun;
the accelerate case runs the shipped multi-GPU accelerate config forced onto the CPU
(one process). Both continue the optimiser state the previous step saved.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from served_rows import served_rows

from seal_graph.bundled_model import ensure_bundled_model
from seal_graph.records import TrainingSample
from seal_graph.training.launched_step import (
    LaunchedStepError,
    StepJob,
    load_result,
    run_job,
    write_job,
)
from seal_graph.training.policy import ADAPTER_FILE, Policy
from seal_graph.training.settings import LoraSettings, OptimConfig

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
ACCELERATE = [
    sys.executable,
    "-m",
    "accelerate.commands.launch",
    "--config_file",
    str(ROOT / "examples/accelerate/multi_gpu.yaml"),
    "--cpu",
    "--num_processes",
    "1",
]


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(ensure_bundled_model(), LoraSettings(r=4, alpha=8))


def _rows(policy: Policy) -> list[TrainingSample]:
    """Four calls, two rewarded and two not."""
    return served_rows(
        policy, ["set x to 1", "add 2 and 3", "no idea", "hello"], [1.0, 1.0, -1.0, -1.0]
    )


@pytest.mark.slow  # two ranks train on two cores: over a minute and a half
def test_step_under_torchrun_two_ranks_then_accelerate_continues_optimizer(
    policy: Policy, tmp_path: Path
) -> None:
    job = StepJob(
        base_dir=policy.base_dir,
        lora=LoraSettings(r=4, alpha=8),
        optim=OptimConfig(learning_rate=1e-3, beta=0.0, micro_batch=1),
    )
    job_dir = tmp_path / "job"
    rows = _rows(policy)
    write_job(job_dir, job, rows, policy)
    before = load_file(str(job_dir / "adapter_in" / ADAPTER_FILE))

    metrics = run_job(job_dir, TORCHRUN, tmp_path / "step.log")
    assert metrics["world_size"] == 2 and metrics["samples"] == 4
    assert metrics["optimizer_state_loaded"] == 0
    after = load_file(str(job_dir / "adapter_out" / ADAPTER_FILE))
    assert max((after[k] - before[k]).abs().max().item() for k in before) > 0
    assert (job_dir / "optimizer.pt").is_file()

    load_result(job_dir, policy)
    moved = policy.completion_logprobs(rows[0].prompt_token_ids, rows[0].completion_token_ids)
    assert moved != rows[0].completion_logprobs  # the loop's policy now has the new weights

    write_job(job_dir, job, _rows(policy), policy)
    metrics = run_job(job_dir, ACCELERATE, tmp_path / "step.log")
    assert metrics["world_size"] == 1 and metrics["optimizer_state_loaded"] == 1
    state = torch.load(job_dir / "optimizer.pt", weights_only=True)
    assert all(s["step"].item() == 2 for s in state["state"].values())  # Adam kept counting


def test_failing_launcher_names_the_command_and_the_log(policy: Policy, tmp_path: Path) -> None:
    job = StepJob(base_dir=tmp_path / "missing-model", lora=LoraSettings(r=4), optim=OptimConfig())
    write_job(tmp_path / "job", job, _rows(policy)[:2], policy)
    with pytest.raises(LaunchedStepError, match=r"(?s)exited with 1.*step\.log"):
        run_job(tmp_path / "job", [], tmp_path / "step.log")
