"""System benchmarks: the trace store, and the README's main command from a fresh clone
(`--only store main`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from perf_serving import ROOT  # benchmarks/perf_serving.py

from seal_graph.store import TraceStore


def bench_store(work: Path, source: Path, copies: int = 500) -> dict:
    episodes = TraceStore(source).episodes()
    store = TraceStore(work / "store-bench.sqlite")
    store.ensure_run("bench", "kv-calc")
    began = time.perf_counter()
    for i in range(copies):
        e = episodes[i % len(episodes)]
        store.write_episode(
            e.model_copy(update={"episode_id": f"b{i}", "run_id": "bench", "task_id": f"t{i}"})
        )
    write_s = time.perf_counter() - began
    began = time.perf_counter()
    read = store.episodes("bench")
    read_s = time.perf_counter() - began
    began = time.perf_counter()
    samples = store.training_samples("bench")
    samples_s = time.perf_counter() - began
    store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = (work / "store-bench.sqlite").stat().st_size
    result = {
        "episodes": len(read),
        "write_episodes_per_s": round(copies / write_s, 1),
        "read_episodes_per_s": round(len(read) / read_s, 1),
        "training_samples_per_s": round(len(samples) / samples_s, 1),
        "bytes_per_episode": round(size / copies),
        "llm_calls_per_episode": round(len(samples) / copies, 2),
    }
    print(json.dumps({"store": result}), flush=True)
    return result


def bench_main_command(work: Path, kept: Path) -> dict:
    """The README's main command as a new user's first run (see the module docstring);
    its report, as written, with its plots, is copied to `kept`."""
    clone, home = work / "clone", work / "home"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True
    ).stdout.strip()
    env = {**os.environ, "SEAL_GRAPH_HOME": str(home)}
    env.pop("VIRTUAL_ENV", None)
    began = time.perf_counter()  # the clone's own install: its code, not this checkout's
    subprocess.run(["bash", "scripts/install.sh"], cwd=clone, env=env, check=True)
    installed = time.perf_counter() - began
    command = [str(clone / ".venv/bin/seal-graph"), "train", "--preset", "cpu", "--out", "runs/cpu"]
    began = time.perf_counter()
    subprocess.run(command, cwd=clone, env=env, check=True)
    seconds = time.perf_counter() - began
    from seal_graph.training.metrics import history_of
    from seal_graph.training.report import STAGES

    lines = (clone / "runs/cpu/metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    peaks = [r["train"]["peak_rss_mb"] for r in records if r.get("train", {}).get("peak_rss_mb")]
    stages = {
        f"iteration {r.iteration} {stage}": round(r.stage_seconds(stage), 1)
        for r in history_of(records)
        for stage in STAGES
        if r.stage_seconds(stage)
    }
    report = (clone / "runs/cpu/report.md").read_text(encoding="utf-8")
    kept.mkdir(parents=True, exist_ok=True)
    for name in ("report.md", "success.png", "labels.png", "advantages.png"):
        if (clone / "runs/cpu" / name).is_file():
            shutil.copy(clone / "runs/cpu" / name, kept / name)
    learning = next(line for line in report.splitlines() if line.startswith("Evaluation success"))
    result = {
        "seconds": round(seconds, 1),
        "install_seconds": round(installed, 1),
        "commit": commit,
        "stages": stages,
        "learning": learning,
        "trainer_peak_rss_gb": round(max(peaks) / 1024, 2) if peaks else None,
        "step_peak_rss_gb": [round(p / 1024, 2) for p in peaks],
        "step_tokens_per_second": [  # an iteration whose groups all tied takes no step
            round(r["train"]["tokens_per_second"], 1)
            for r in records
            if r.get("train", {}).get("tokens_per_second")
        ],
    }
    print(json.dumps({"main": result}), flush=True)
    return result
