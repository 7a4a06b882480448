"""Serving benchmarks: rollouts through the graph against raw and plain vLLM, and hot
swaps under client traffic (`benchmarks/performance.py --only rollout swap`)."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import openai
import torch

from seal_graph import ModelServer, ServerSettings
from seal_graph.bundled_model import ensure_bundled_model
from seal_graph.registry import get_environment
from seal_graph.runners.rollouts import run_rollouts
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


def client_streams(endpoints: list[dict], stop: Any, outcome: Any) -> None:
    """8 client streams without retries asking for the served name until `stop` is set,
    spread over `endpoints` in turn, counting answered and failed requests into
    `outcome` (run in its own process, as outside clients are: in the swapping process
    their event loop would hold the GIL the swap needs and the swaps would time the
    benchmark, not the server)."""

    async def stream(client: openai.AsyncOpenAI, model: str) -> None:
        while not stop.is_set():
            try:
                await client.completions.create(
                    model=model, prompt="Once upon a time", max_tokens=16
                )
                outcome[0] += 1
            except openai.OpenAIError:
                outcome[1] += 1

    async def streams() -> None:
        clients = [
            openai.AsyncOpenAI(base_url=e["base_url"], api_key=e["api_key"], max_retries=0)
            for e in endpoints
        ]
        await asyncio.gather(
            *(
                stream(clients[i % len(clients)], endpoints[i % len(endpoints)]["model"])
                for i in range(8)
            )
        )
        for client in clients:
            await client.close()

    asyncio.run(streams())


def swaps_under_traffic(sync: Any, weights: Path, probe: Any, score: Any) -> tuple:
    """Three verified swaps while 8 client streams (`client_streams`) ask for the swapped
    name: (median seconds per swap, median of those spent loading, requests answered,
    requests failed). `sync` is a `WeightSync`, or `Replicas` (every replica swapped; the
    streams spread over them)."""
    context = multiprocessing.get_context("spawn")
    stop, outcome = context.Event(), context.Array("i", 2)
    endpoints = sync.endpoints() if hasattr(sync, "endpoints") else [sync.endpoint]
    clients = context.Process(
        target=client_streams, args=([e.model_dump() for e in endpoints], stop, outcome)
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
        seconds, loading = [], []
        for index in range(3):
            began = time.perf_counter()
            report = sync.swap(weights, f"s{index}", probe, score)
            assert report.ok, getattr(report, "error", report)
            seconds.append(time.perf_counter() - began)
            loading.append(getattr(report, "report", report).load_seconds)
    finally:
        stop.set()
        clients.join(60)
    return statistics.median(seconds), statistics.median(loading), outcome[0], outcome[1]


def _probe_prompt(policy: Any) -> list[int]:
    prompt = policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Store 3 under the key 'a'."}], add_generation_prompt=True
    )
    return list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)


def _trained_looking_policy(policy: Any) -> Any:
    """The policy with a random adapter (`lora_B ~ N(0, 0.01)`): weights a swap changes."""
    with torch.no_grad():
        for name, weight in policy.model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, 0.01)
    return policy


def bench_swap(work: Path) -> dict:
    from seal_graph.serving.launch import detect_platform, serving_dtype
    from seal_graph.training.policy import Policy
    from seal_graph.training.settings import LoraSettings
    from seal_graph.training.weight_sync import Probe, WeightSync, probe_check, reference_probe

    policy = Policy(ensure_bundled_model(), LoraSettings())
    prompt = _probe_prompt(policy)
    probe = Probe(prompt_token_ids=prompt, completion_token_ids=policy.greedy(prompt, 12))
    _trained_looking_policy(policy)
    expected = policy.completion_logprobs  # the trainer scores the server's answer
    adapter = policy.save_adapter(work / "adapter")
    merged = policy.save_merged(work / "merged")
    result: dict[str, Any] = {}
    began = time.perf_counter()  # the trainer's own answer, before the swaps (as the loop)
    full_dtype = serving_dtype(ServerSettings(enable_lora=False), detect_platform())
    check = probe_check(full_dtype)  # the full-swap server's (fastest)
    lora_check = probe_check(serving_dtype(ServerSettings(), detect_platform()))
    full_probe = reference_probe(probe, policy, check)
    # one reference where both servers verify alike (a GPU serves both in `auto`)
    lora_probe = full_probe if lora_check == check else reference_probe(probe, policy, lora_check)
    result.update(
        reference_s=time.perf_counter() - began,
        probe_tokens=full_probe.answer_tokens,
        probe_runners_up=len(full_probe.alternative_ids),
    )
    # LoRA swaps on a LoRA server (the stable name is the adapter; the streams ask for
    # it), full reloads on a server without LoRA (as `train` serves full swaps); 8 client
    # streams without retries run through both.
    with ModelServer.start(ServerSettings(served_model_name="seal-agent-base")) as server:
        lora = WeightSync(
            server.endpoint.model_copy(update={"model": "seal-agent"}), "lora", lora_check
        )
        assert lora.swap(adapter, "first", lora_probe, expected).ok  # the name exists from here
        result["lora_s"], result["lora_load_s"], ok, failed = swaps_under_traffic(
            lora, adapter, lora_probe, expected
        )
        result.update(requests_during_lora_swaps=ok, failed_during_lora_swaps=failed)
        lora.close()
    with ModelServer.start(ServerSettings(enable_lora=False)) as server:
        full = WeightSync(server.endpoint, "full", check)
        result["full_s"], result["full_load_s"], ok, failed = swaps_under_traffic(
            full, merged, full_probe, expected
        )
        result.update(requests_during_swaps=ok, failed_during_swaps=failed)
        began = time.perf_counter()
        server.restart()
        result["restart_s"] = time.perf_counter() - began
        full.close()
    result = {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}
    print(json.dumps({"swap": result}), flush=True)
    return result


def bench_replica_swap(work: Path) -> dict:
    """Full swaps into two servers a core each (as `train --set servers=2` starts them),
    both verified, under 8 client streams spread over the two."""
    from seal_graph.serving.launch import detect_platform, serving_dtype
    from seal_graph.training.policy import Policy
    from seal_graph.training.replicas import Replica, Replicas
    from seal_graph.training.run import core_split
    from seal_graph.training.settings import LoraSettings
    from seal_graph.training.weight_sync import Probe, WeightSync, probe_check, reference_probe

    policy = _trained_looking_policy(Policy(ensure_bundled_model(), LoraSettings()))
    prompt = _probe_prompt(policy)
    merged = policy.save_merged(work / "merged")
    check = probe_check(serving_dtype(ServerSettings(enable_lora=False), detect_platform()))
    probe = reference_probe(
        Probe(prompt_token_ids=prompt, completion_token_ids=policy.greedy(prompt, 12)),
        policy,
        check,
    )
    servers = [
        ModelServer.start(ServerSettings(enable_lora=False, cpu_cores=cores), wait=False)
        for cores in core_split(2)
    ]
    try:
        for server in servers:
            server.wait_until_ready()
        replicas = Replicas([Replica(WeightSync(s.endpoint, "full", check)) for s in servers])
        seconds, loading, ok, failed = swaps_under_traffic(
            replicas, merged, probe, policy.completion_logprobs
        )
        replicas.close()
    finally:
        for server in servers:
            server.stop()
    result = {
        "replicas": 2,
        "seconds": round(seconds, 3),
        "first_replica_load_seconds": round(loading, 3),
        "requests": ok,
        "failed_requests": failed,
    }
    print(json.dumps({"replica_swap": result}), flush=True)
    return result
