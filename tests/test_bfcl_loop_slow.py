"""The closed loop runs one iteration on two BFCL training tasks on CPU (slow: BFCL
prompts carry 3-7k tokens of tool schemas; on 2 cores ~2 min for GRPO, ~7 min for ETO)."""

from __future__ import annotations

import sqlite3

import pytest

from seal_graph.training.config import load_config
from seal_graph.training.run import run_training

pytestmark = [pytest.mark.server, pytest.mark.slow]


def test_one_loop_iteration_on_two_bfcl_tasks(tmp_path) -> None:
    config = load_config(
        None,
        "cpu",
        env="bfcl",
        iterations=1,
        warm_start={"epochs": 0},
        rollout={"tasks_per_iteration": 2, "group_size": 2, "max_tokens": 64, "step_limit": 2},
        eval={"limit": 1, "baseline": False, "max_tokens": 64},
        optim={"max_samples": 4, "micro_batch": 1},
    )
    result = run_training(config, out=tmp_path / "run")
    (record,) = result["history"]
    assert record["rollout"]["episodes"] == 4 and record["rollout"]["rollout_failures"] == 0
    # the untrained 135M model solves no BFCL task: both groups have no GRPO signal
    assert record["train"]["groups"] == 2 and "evaluate" in record
    with sqlite3.connect(tmp_path / "run" / "traces.sqlite") as db:
        runs = dict(db.execute("SELECT run_id, COUNT(*) FROM episodes GROUP BY run_id"))
    assert runs == {"run/it1": 4, "run/eval-it1": 1}
    assert (tmp_path / "run" / "report.md").exists()


def test_one_eto_iteration_on_two_bfcl_tasks_takes_a_dpo_step(tmp_path) -> None:
    """The untrained model never solves a BFCL task, so GRPO above has no signal; ETO's
    DPO round (expert trajectory over the model's own failure) trains on BFCL-sized
    trajectories anyway."""
    config = load_config(
        None,
        "cpu",
        env="bfcl",
        algo="eto",
        iterations=1,
        warm_start={"epochs": 0},
        rollout={"tasks_per_iteration": 2, "group_size": 2, "max_tokens": 64, "step_limit": 2},
        eval={"limit": 1, "baseline": False, "max_tokens": 64},
        dpo={"max_pairs": 1, "batch_pairs": 1, "micro_batch": 1, "epochs": 1},
    )
    result = run_training(config, out=tmp_path / "run")
    (record,) = result["history"]
    assert record["rollout"]["episodes"] == 4
    assert record["train"]["stepped"] is True
    assert record["swap"]["ok"] is True
