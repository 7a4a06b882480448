"""`seal-graph train` killed mid-iteration (SIGKILL) resumes with `--resume` and ends
with exactly the episodes of an uninterrupted run — each stored once."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.server, pytest.mark.slow]
TESTS = Path(__file__).resolve().parent

CONFIG = """
preset = "cpu"
env = "loop_envs:make_env"
iterations = 2
[rollout]
tasks_per_iteration = 2
group_size = 2
max_tokens = 8
[eval]
every = 1
limit = 2
max_tokens = 8
[optim]
learning_rate = 1e-4
[interface]
min_count = 1
[warm_start]
steps = 0
"""


def train(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(TESTS), "COLUMNS": "200"}
    return subprocess.Popen(
        [sys.executable, "-m", "seal_graph", "train", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
        start_new_session=True,
    )


def kill_server(port: str) -> None:
    """End the killed run's server with its whole process group (its engine workers)."""
    pattern = f"vllm.entrypoints.openai.api_server.*--port {port}"
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, check=False)
    for pid in found.stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(pid), signal.SIGKILL)


def test_killed_run_resumes_with_no_episode_lost_or_duplicated(tmp_path) -> None:
    config = tmp_path / "run.toml"
    config.write_text(CONFIG)
    out = tmp_path / "run"
    process = train("--config", str(config), "--out", str(out))
    seen, port = "", None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            pytest.fail(f"training exited early:\n{seen[-3000:]}")
        seen += line
        port = port or (re.search(r"127\.0\.0\.1:(\d+)/v1", line) or [None, None])[1]
        if "iteration 1 diagnose" in line:  # the first batch is stored; kill mid-iteration
            break
    else:
        pytest.fail(seen[-3000:])
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert port, seen[-3000:]  # the server is in its own session: it must be ended by port
    kill_server(port)
    resumed = train("--resume", "--out", str(out))
    output, _ = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, output[-3000:]
    assert "report:" in output
    with sqlite3.connect(out / "traces.sqlite") as db:
        runs = dict(db.execute("SELECT run_id, COUNT(*) FROM episodes GROUP BY run_id"))
    # baseline eval (2) + per iteration: 2 tasks x 2 samples and an eval of 2
    assert runs == {
        "run/eval-baseline": 2,
        "run/it1": 4,
        "run/eval-it1": 2,
        "run/it2": 4,
        "run/eval-it2": 2,
    }
    assert (out / "report.md").exists() and (out / "success.png").exists()
