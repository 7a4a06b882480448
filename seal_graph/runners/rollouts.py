"""Run many rollouts concurrently through the rollout graph, into the trace store.

Each (task, sample) pair is one LangGraph thread with a stable id. The graph runs with a
SQLite checkpointer, so a batch killed mid-way resumes: finished episodes are already in
the store and are skipped, unfinished threads continue from their last checkpoint (their
environment state rebuilt by replaying the recorded tool calls).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from seal_graph import registry
from seal_graph.client import is_retryable
from seal_graph.environment import Environment
from seal_graph.errors import ServerError
from seal_graph.graphs.rollout import RolloutContext, builder
from seal_graph.interface import InterfaceVersion
from seal_graph.records import Episode
from seal_graph.runners.own_agent import AgentFactory, run_agent_episode
from seal_graph.serving import ModelEndpoint
from seal_graph.sessions import SessionPool
from seal_graph.settings import RolloutSettings
from seal_graph.store import TraceStore


@dataclass
class RolloutBatchReport:
    """What a batch produced and where its time went.

    `finished` holds a few numbers per episode (bounded memory over long runs); the full
    episodes are in the store, and in `episodes` only when asked for (`keep_episodes`).
    """

    finished: list[EpisodeSummary] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    skipped: int = 0
    failures: list[tuple[str, int, str]] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def model_seconds(self) -> float:
        return sum(e.model_seconds for e in self.finished)

    @property
    def busy_seconds(self) -> float:
        return sum(e.seconds for e in self.finished)

    @property
    def mean_in_flight(self) -> float:
        """Model requests in flight on average over the batch's wall time (at most the
        batch's concurrency; tool execution and the batch's last episodes lower it)."""
        return self.model_seconds / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def success_rate(self) -> float:
        return sum(e.success for e in self.finished) / len(self.finished) if self.finished else 0.0


@dataclass(frozen=True)
class EpisodeSummary:
    task_id: str
    sample_index: int
    success: bool
    seconds: float
    model_seconds: float


def assign_servers(task_ids: list[str], servers: int) -> dict[str, int]:
    """The server each task's episodes go to: in turn, in the batch's task order, so a
    batch spreads evenly (a hash of the id put all four of a small batch on one server);
    the same batch, resumed, gets the same assignment."""
    return {task: i % servers for i, task in enumerate(dict.fromkeys(task_ids))}


def episode_id_for(run_id: str, task_id: str, sample: int) -> str:
    """Stable across restarts, so a resumed thread keeps its id."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"seal-graph/{run_id}/{task_id}/{sample}").hex


async def run_rollouts(
    env: str | Environment,
    model: ModelEndpoint | list[ModelEndpoint] | BaseChatModel,
    task_ids: list[str],
    *,
    store: TraceStore,
    run_id: str,
    settings: RolloutSettings | None = None,
    interface: InterfaceVersion | None = None,
    mode: Literal["train", "eval"] = "train",
    policy_version: str = "base",
    max_exceptions: int = 0,
    checkpoint_path: Path | None = None,
    show_progress: bool = True,
    keep_episodes: bool = True,
    agent: AgentFactory | None = None,
) -> RolloutBatchReport:
    """Roll out `settings.group_size` episodes of every task (a GRPO group each),
    `settings.concurrency` at once, sampled as `settings` says.

    `model` is an endpoint (the usual case: the served policy, with token ids), several
    endpoints serving the same policy (each task, hence each GRPO group, is pinned to one
    of them, so its shared prompt prefix stays in that server's cache), or any LangChain
    chat model.

    `agent`: the user's own agent (`seal_graph.runners.own_agent`) instead of the built-in
    rollout graph; an episode cut by a kill starts over (finished ones are kept).

    Infrastructure failures (the model server unreachable after retries) fail an episode;
    more than `max_exceptions` of them abort the batch, keeping everything stored so far.
    """
    settings = settings or RolloutSettings()
    environment = registry.resolve_environment(env)
    store.ensure_run(run_id, environment.name)
    done = store.done_keys(run_id)
    samples = settings.group_size
    jobs = [(t, s) for t in task_ids for s in range(samples) if (t, s) not in done]
    report = RolloutBatchReport(skipped=len(task_ids) * samples - len(jobs))
    pool = SessionPool()  # every session of the batch, closed when the batch ends
    shared = {
        "env": environment.name,
        "settings": settings,
        "run_id": run_id,
        "interface": interface,
        "mode": mode,
        "policy_version": policy_version,
        "sessions": pool,
    }
    if isinstance(model, BaseChatModel):
        contexts = [RolloutContext(chat_model=model, **shared)]
    else:
        endpoints = model if isinstance(model, list) else [model]
        contexts = [  # the key goes in the client, never into a context value
            RolloutContext(
                chat_model=registry.chat_model(
                    e.base_url, e.api_key, e.model, settings.temperature, settings.max_tokens
                ),
                base_url=e.base_url,
                model=e.model,
                **shared,
            )
            for e in endpoints
        ]
    servers = assign_servers(task_ids, len(contexts))
    checkpoints = checkpoint_path or store.path.with_suffix(".checkpoints.sqlite")
    began = time.perf_counter()
    async with AsyncSqliteSaver.from_conn_string(str(checkpoints)) as saver:
        graph = builder.compile(checkpointer=saver, name="rollout")
        limiter = asyncio.Semaphore(settings.concurrency)
        progress = Progress(
            TextColumn("[bold]rollouts[/] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            disable=not show_progress,
        )

        async def episode_of(task_id: str, sample: int, thread: str) -> Episode:
            context = contexts[servers[task_id]]
            episode_id = episode_id_for(run_id, task_id, sample)
            if agent is not None:
                return await run_agent_episode(
                    agent,
                    environment,
                    await asyncio.to_thread(environment.task, task_id),
                    context.chat_model,
                    settings=settings,
                    run_id=run_id,
                    episode_id=episode_id,
                    sample_index=sample,
                    interface=interface,
                    mode=mode,
                    policy_version=policy_version,
                    endpoint=context.base_url,
                )
            config = {"configurable": {"thread_id": thread}, "recursion_limit": 10_000}
            snapshot = await graph.aget_state(config)
            payload = (
                None
                if snapshot.next
                else {"task_id": task_id, "sample_index": sample, "episode_id": episode_id}
            )
            result = await graph.ainvoke(payload, config, context=context)
            return Episode.model_validate(result["episode"])

        async def one(task_id: str, sample: int, bar: int) -> None:
            thread = f"{run_id}/{task_id}/{sample}"
            async with limiter:
                try:
                    episode = await episode_of(task_id, sample, thread)
                    store.write_episode(episode)
                    if agent is None:  # the rollout graph's checkpoints, now done with
                        await saver.adelete_thread(thread)
                    report.finished.append(
                        EpisodeSummary(
                            episode.task_id,
                            episode.sample_index,
                            episode.success,
                            episode.seconds,
                            episode.model_seconds,
                        )
                    )
                    if keep_episodes:
                        report.episodes.append(episode)
                except Exception as exc:  # counted against max_exceptions, then raised
                    report.failures.append((task_id, sample, f"{type(exc).__name__}: {exc}"))
                    if len(report.failures) > max_exceptions:
                        raise
                finally:
                    wins = sum(e.success for e in report.finished)
                    progress.update(
                        bar,
                        advance=1,
                        description=(
                            f"{environment.name} · success {wins}/{len(report.finished)}"
                            + (f" · failed {len(report.failures)}" if report.failures else "")
                        ),
                    )

        with progress:
            bar = progress.add_task(environment.name, total=len(jobs))
            try:
                async with asyncio.TaskGroup() as group:
                    for task_id, sample in jobs:
                        group.create_task(one(task_id, sample, bar))
            except ExceptionGroup as failed:  # surface the first failure itself
                first = failed.exceptions[0]
                if is_retryable(first):
                    raise ServerError(
                        f"the model server stopped answering ({type(first).__name__}: {first}) "
                        f"and retries ran out. Run {run_id!r} keeps its "
                        f"{store.count(run_id)} stored episodes; start the server again and "
                        "rerun the same command to resume (finished episodes are skipped, "
                        "unfinished ones continue from their checkpoints)."
                    ) from first
                raise first from None
            finally:
                pool.close()
    report.wall_seconds = time.perf_counter() - began
    return report
