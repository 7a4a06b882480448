"""Speed and cost, as ratios measured in one run, written to docs/results/performance.md.

    .venv/bin/python benchmarks/performance.py [--concurrency 1 4 8 16 32]
        [--only rollout swap replicas grpo step limit store main] [--episodes TRACES]

* rollout: tokens/s through the LangGraph rollout graph (kv-calc episodes: tools, checks,
  checkpoints, trace store) vs raw vLLM generation of the same prompts (the graph's own
  served prompt token ids) with the same completion lengths, at the same concurrency, on
  the same server and on plain vLLM in its fastest configuration on this machine;
* swap: seconds from "weights are on disk" to "the server answers with them, verified"
  for a LoRA load and an in-place full reload, vs restarting the server; failed requests
  of 8 client streams running throughout;
* replicas: seconds to swap a merged checkpoint into two servers a core each (as `train
  --set servers=2` runs them), both verified, under 8 client streams spread over them;
  failed requests;
* grpo: seconds per optimiser step of the diagnosis-reweighted GRPO (`TraceGRPOTrainer`:
  batch built from stored calls) vs TRL's plain `GRPOTrainer` handed the identical tensors;
* step: seconds and useful tokens/s of the GRPO step the learning benchmark takes, on
  whole episodes one of its runs served (`--episodes`, a run's trace store);
* limit: the machine's training limit, LoRA r=16 forward+backward+AdamW tokens/s of the
  bundled model on random tokens (batch x length 1x2048, 2x1024, 4x640), float32 and,
  where the CPU has bf16 kernels, under bf16 autocast: what the GRPO step and the warm
  start are measured against (`docs/results/learning.md`);
* store: trace-store write and read throughput (episodes/s) and bytes per episode;
* main (not in the default set; ~13 min): the README's main command as a new user runs
  it: a fresh clone of HEAD, its own install (`scripts/install.sh`, timed apart; pip's
  cache makes it faster than a first install), an empty `SEAL_GRAPH_HOME` (the model
  converted again); wall time and each stage's seconds. Kept per machine type: section
  `main` on a CPU with bf16 kernels, `main-without-bf16` on one without.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine import cpu_name, machine  # benchmarks/machine.py
from perf_report import write_report
from perf_serving import (
    ROOT,
    bench_anchor,
    bench_replica_swap,
    bench_rollout,
    bench_swap,
)
from perf_system import bench_main_command, bench_store
from perf_training import bench_grpo, bench_limit, bench_step

from seal_graph import ModelServer, ServerSettings
from seal_graph.serving.launch import has_bf16_kernels

MAIN_SECTIONS = {
    True: ("main", "docs/results/cpu-loop"),
    False: ("main-without-bf16", "docs/results/cpu-loop-avx2"),
}
"""By whether the CPU has bf16 kernels: the main command's section of performance.json,
and where its run's report is kept as written, with its plots."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    parser.add_argument(
        "--only", nargs="+", default=["rollout", "swap", "grpo", "store"], help="Sections."
    )
    parser.add_argument(
        "--episodes",
        type=Path,
        default=ROOT / "runs/bench-learning/seal-s0/traces.sqlite",
        help="The step section's source: a learning-benchmark run's trace store.",
    )
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "rollout" in args.only or "store" in args.only:
            # served as `train` serves its rollouts: fastest dtype, eager, no LoRA
            with ModelServer.start(ServerSettings(enable_lora=False)) as server:
                levels = args.concurrency if "rollout" in args.only else [8]
                rows, calls = bench_rollout(server, levels, work)
            if "rollout" in args.only:
                bench_anchor(rows, calls)
                results["rollout"] = rows
        if "store" in args.only:
            results["store"] = bench_store(work, work / "rollout.sqlite")
        if "swap" in args.only:
            results["swap"] = bench_swap(work)
        if "replicas" in args.only:
            results["replica_swap"] = bench_replica_swap(work)
        if "grpo" in args.only:
            results["grpo"] = bench_grpo()
        if "step" in args.only:
            results["step"] = bench_step(args.episodes)
        if "limit" in args.only:
            results["limit"] = bench_limit()
        if "main" in args.only:  # one section per machine type: the README gives both
            section, kept = MAIN_SECTIONS[has_bf16_kernels()]
            results[section] = bench_main_command(work, ROOT / kept)
    command = f".venv/bin/python benchmarks/performance.py {' '.join(sys.argv[1:])}".strip()
    command += f"  ({time.strftime('%Y-%m-%d %H:%M')}; {machine()})"
    saved = ROOT / "docs/results/performance.json"
    merged = json.loads(saved.read_text()) if saved.exists() else {}
    merged.update({k: {"command": command, "data": v} for k, v in results.items()})
    if "rollout" in results:  # the headline figures, plain at the top level
        merged["rollout_vs_fastest_engine"] = {
            str(r["concurrency"]): r["ratio_vs_fastest"]
            for r in results["rollout"]
            if r["concurrency"] in (8, 16)
        }
    for section, _ in MAIN_SECTIONS.values():
        if section in results:  # by machine type (the CPU's name and its bf16 kernels)
            main = results[section]
            merged.setdefault("main_command_seconds", {})[cpu_name()] = main["seconds"]
            merged.setdefault("trainer_peak_rss_gb", {})[cpu_name()] = main["trainer_peak_rss_gb"]
    if "replica_swap" in results:
        merged["replica_swap"] = {
            k: results["replica_swap"][k] for k in ("replicas", "seconds", "failed_requests")
        }
    saved.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
    sections = {k: v for k, v in merged.items() if isinstance(v, dict) and "data" in v}
    data = {k: v["data"] for k, v in sections.items()}
    print(f"wrote {write_report(data, {k: v['command'] for k, v in sections.items()})}")


if __name__ == "__main__":
    main()
