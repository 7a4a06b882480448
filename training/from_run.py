"""Train on episodes someone already has: one step on a stored run, then the swap.

`seal-graph train --from-run RUN --store traces.sqlite` (or `TrainConfig.from_run`)
runs the closed loop for one iteration whose batch is not rolled out but read from the
trace store: RUN's episodes (from seal-graph's own rollouts, `train --agent` runs, or an
agent recorded with `seal_graph.runners.own_agent`) are diagnosed, weighted, trained on
with the configured algorithm (one GRPO or DPO step), and the new weights are swapped
in and verified, as any iteration's.

GRPO trains on the token ids the server sampled and their logprobs, never re-tokenised
text: episodes without them (a model that was not asked for token ids) are refused
before any server starts, with what to do instead. A GRPO group is one task's episodes
under one interface and policy version, so a run with one episode per task gives GRPO no
signal (the step then trains nothing, and says so).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from pydantic import BaseModel, Field

from seal_graph.errors import ConfigError
from seal_graph.records import Episode
from seal_graph.store import TraceStore


class FromRun(BaseModel):
    """Where the episodes are."""

    store: Path = Field(description="The trace store (SQLite file) that holds the run.")
    run: str = Field(description="The run id in that store (`seal-graph` lists them on error).")


def stored_episodes(source: FromRun) -> list[Episode]:
    """The run's episodes, checked to carry what training needs; a clear error if not."""
    if not source.store.is_file():
        raise ConfigError(f"--store {source.store}: no such trace store")
    store = TraceStore(source.store)
    try:
        runs = store.runs()
        episodes = store.episodes(source.run)
    finally:
        store.close()
    if not episodes:
        raise ConfigError(
            f"run {source.run!r} has no episodes in {source.store}; its runs: "
            f"{', '.join(runs) or 'none'}"
        )
    untokenised = [
        e.episode_id
        for e in episodes
        if not e.llm_calls or not all(c.completion_token_ids for c in e.llm_calls)
    ]
    if untokenised:
        raise ConfigError(
            f"{len(untokenised)} of {len(episodes)} episodes of run {source.run!r} have no "
            "served token ids (e.g. episode "
            f"{untokenised[0]}), and training uses exactly the tokens the server sampled. "
            "Roll them out with seal-graph (its rollouts, `train --agent`) or a "
            "`ServedChatModel(return_token_ids=True)` against a vLLM server."
        )
    return episodes


def import_batch(source: FromRun, store: TraceStore, batch: str, env: str) -> list[Episode]:
    """Copy the run's episodes into `store` as the batch `batch` (idempotent)."""

    def renamed(episode: Episode) -> Episode:  # ids stay unique if both stores merge
        new_id = uuid.uuid5(uuid.NAMESPACE_URL, f"{batch}/{episode.episode_id}").hex
        return episode.model_copy(update={"run_id": batch, "episode_id": new_id})

    episodes = [renamed(e) for e in stored_episodes(source)]
    wrong = {e.env for e in episodes} - {env}
    if wrong:
        raise ConfigError(
            f"run {source.run!r} holds episodes of {', '.join(sorted(wrong))}, not {env}: "
            f"train with --env {sorted(wrong)[0]}"
        )
    store.ensure_run(batch, env)
    done = store.done_keys(batch)
    for episode in episodes:
        if (episode.task_id, episode.sample_index) not in done:
            store.write_episode(episode)
    return store.episodes(batch)
