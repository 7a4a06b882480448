"""Memory over a long rollout run: RSS of the process across 1000+ kv-calc episodes.

    .venv/bin/python benchmarks/memory.py [--episodes 1024] [--out runs/bench-memory]

The model is a scripted tool-calling chat model (no server: this measures our side —
the rollout graph, checkpointer, tool sessions, trace store, caches). Prints one JSON
line per sample (episodes stored, RSS MiB) and a summary line; `docs/results/
reliability.md` records the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from seal_graph.registry import get_environment
from seal_graph.runners.rollouts import run_rollouts
from seal_graph.settings import RolloutSettings
from seal_graph.store import TraceStore


class CyclingToolModel(BaseChatModel):
    """Calls `set_value`, then answers in text; again and again."""

    step: Any = None

    @property
    def _llm_type(self) -> str:
        return "cycling-fake"

    def bind_tools(self, tools: Any, **kwargs: Any) -> CyclingToolModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        if self.step is None:
            self.step = itertools.count()
        if next(self.step) % 2 == 0:
            call = {"id": "c", "name": "set_value", "args": {"key": "a", "value": 1.0}}
            reply = AIMessage(content="", tool_calls=[call])
        else:
            reply = AIMessage(content="Done.")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1024)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-memory"))
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    env = get_environment("kv-calc")
    tasks = [t.id for t in env.tasks("train")]
    samples = -(-args.episodes // len(tasks))
    store = TraceStore(args.out / "traces.sqlite")
    readings: list[tuple[int, float]] = []
    done = threading.Event()

    def sample() -> None:
        reader = TraceStore(args.out / "traces.sqlite")
        while not done.wait(1.0):
            readings.append((reader.count("mem"), rss_mib()))
            print(json.dumps({"episodes": readings[-1][0], "rss_mib": round(readings[-1][1], 1)}))
        reader.close()

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    began = time.perf_counter()
    report = asyncio.run(
        run_rollouts(
            env,
            CyclingToolModel(),
            tasks,
            store=store,
            run_id="mem",
            settings=RolloutSettings(group_size=samples, concurrency=8, step_limit=2),
            show_progress=False,
            keep_episodes=False,
        )
    )
    done.set()
    watcher.join()
    stored = store.count("mem")
    early = next((rss for n, rss in readings if n >= stored // 5), readings[0][1])
    summary = {
        "episodes": stored,
        "failures": len(report.failures),
        "seconds": round(time.perf_counter() - began, 1),
        "rss_at_20pct_mib": round(early, 1),
        "rss_end_mib": round(rss_mib(), 1),
        "rss_peak_mib": round(max(r for _, r in readings), 1),
        "growth_after_20pct_mib": round(rss_mib() - early, 1),
    }
    print(json.dumps({"summary": summary}))


if __name__ == "__main__":
    main()
