"""`seal-graph demo`: the served model end to end, shown in full.

First one tool-using exchange (the chat template renders the tool, vLLM's hermes parser
returns a structured tool call, a real LangChain tool executes it, every completion
carries its served token ids); then a small batch of rollouts of the built-in `kv-calc`
environment through the rollout graph into a trace store, verified executably.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from rich.console import Console
from rich.table import Table

from seal_graph.client import served_tokens
from seal_graph.runners.rollouts import run_rollouts
from seal_graph.serving import ModelEndpoint
from seal_graph.settings import RolloutSettings
from seal_graph.store import TraceStore
from seal_graph.tools.kv_calc import make_env


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers and return the product."""
    return a * b


def run_demo(endpoint: ModelEndpoint, console: Console) -> list[BaseMessage]:
    """Ask for a product, force one tool call, execute it, and let the model answer."""
    llm = endpoint.chat_model(temperature=0.0, max_tokens=128, return_token_ids=True)
    messages: list[BaseMessage] = [
        SystemMessage("You are a careful assistant. Use the tools to compute."),
        HumanMessage("What is 17 times 23?"),
    ]
    stats = Table("step", "served tokens", "seconds", "tokens/s", title="served completions")
    began = time.perf_counter()

    def call(step: str, **bind: object) -> BaseMessage:
        start = time.perf_counter()
        reply = llm.bind_tools([multiply], **bind).invoke(messages)
        seconds = time.perf_counter() - start
        tokens = served_tokens(reply)
        count = len(tokens.completion_token_ids) if tokens else 0
        stats.add_row(step, str(count), f"{seconds:.2f}", f"{count / seconds:.1f}")
        messages.append(reply)
        return reply

    first = call("tool call", tool_choice="required")
    for tool_call in first.tool_calls:
        messages.append(multiply.invoke(tool_call))
    call("answer")

    console.rule(f"demo: '{endpoint.model}' at {endpoint.base_url}")
    for message in messages:
        text = message.content or ""
        calls = getattr(message, "tool_calls", None)
        if calls:
            text = f"{text} -> " + ", ".join(f"{c['name']}({c['args']})" for c in calls)
        console.print(f"[bold]{message.type:>6}[/]: {text}", highlight=False)
    console.print(stats)
    console.print(f"total {time.perf_counter() - began:.1f} s")
    return messages


def run_rollout_demo(
    endpoint: ModelEndpoint, console: Console, out_dir: Path, tasks: int = 4, samples: int = 2
) -> None:
    """A GRPO-style group of rollouts per task on kv-calc, stored and summarised."""
    env = make_env()
    chosen = env.tasks("test")[:tasks]
    store = TraceStore(out_dir / "traces.sqlite")
    console.rule(f"rollouts: kv-calc, {tasks} tasks x {samples} samples, temperature 1.0")
    report = asyncio.run(
        run_rollouts(
            env,
            endpoint,
            [t.id for t in chosen],
            store=store,
            run_id=f"demo-{int(time.time())}",
            settings=RolloutSettings(
                group_size=samples, concurrency=8, max_tokens=96, step_limit=4
            ),
        )
    )
    table = Table(
        "task",
        "sample",
        "turns passed",
        "tool calls (errors)",
        "LLM calls",
        "served tokens",
        "reward",
        title="episodes",
    )
    for episode in sorted(report.episodes, key=lambda e: (e.task_id, e.sample_index)):
        passed = sum(bool(t.evidence.passed) for t in episode.turns)
        errors = sum(e.status == "error" for e in episode.tool_events)
        tokens = sum(len(c.completion_token_ids) for c in episode.llm_calls)
        table.add_row(
            episode.task_id,
            str(episode.sample_index),
            f"{passed}/{len(episode.turns)}",
            f"{len(episode.tool_events)} ({errors})",
            str(len(episode.llm_calls)),
            str(tokens),
            f"{episode.reward:.0f}",
        )
    console.print(table)
    console.print(
        f"success {report.success_rate:.0%} over {len(report.episodes)} episodes in "
        f"{report.wall_seconds:.0f} s; traces in {store.path} "
        "(the bundled base model rarely calls tools: training is what changes that)"
    )
    store.close()
