"""Training benchmarks: the GRPO step against plain TRL, on the learning benchmark's
episodes, and the machine's training limit (`--only grpo step limit`)."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from seal_graph.bundled_model import ensure_bundled_model
from seal_graph.records import TrainingSample
from seal_graph.registry import get_environment
from seal_graph.store import TraceStore


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
    from learning_runs import benchmark_config  # benchmarks/learning_runs.py

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
