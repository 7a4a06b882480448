"""Diagnose → evolve: the one implementation that both graphs run.

The `diagnose_evolve` graph (a stored batch, from the CLI or Studio) and the training
loop's diagnose and evolve stages call these functions, so the labels a batch gets and
the interface it leads to do not depend on which entry point ran them. The LLM judge is
optional in both: given a chat model, it labels the turns no executable evidence
supports (`unverified`).
"""

from __future__ import annotations

import asyncio

from langchain_core.language_models import BaseChatModel

from seal_graph.diagnosis import TaskLookup, diagnose_batch, label_statistics, looks_like_error
from seal_graph.environment import Environment
from seal_graph.interface import InterfaceConfig, InterfaceVersion, evolve
from seal_graph.judge import judge_unverified
from seal_graph.records import Episode, TurnDiagnosis
from seal_graph.store import TraceStore

Labelled = list[tuple[Episode, list[TurnDiagnosis]]]
"""A batch with the labels of every episode's user turns."""


async def diagnose(
    episodes: list[Episode],
    task_of: TaskLookup,
    judge: BaseChatModel | None = None,
    store: TraceStore | None = None,
    environment: Environment | None = None,
) -> Labelled:
    """Label every user turn (rules, then the judge for `unverified` turns, if given) and
    store the labels when a store is given; `environment` says how its arguments compare."""
    arguments = environment.argument_match if environment else "normalised"
    labelled = await asyncio.to_thread(  # reads data files
        diagnose_batch, episodes, task_of, arguments
    )
    if judge is not None:
        labelled = [(e, await judge_unverified(judge, e, d)) for e, d in labelled]
    if store is not None:
        await asyncio.to_thread(_write_labels, store, labelled)
    return labelled


def _write_labels(store: TraceStore, labelled: Labelled) -> None:
    for episode, diagnoses in labelled:
        store.write_labels(episode.episode_id, diagnoses)


def propose(
    current: InterfaceVersion,
    labelled: Labelled,
    config: InterfaceConfig,
    environment: Environment | None = None,
) -> InterfaceVersion:
    """The next interface version the batch's labels and error texts call for (`current`
    itself when nothing changes), with the environment's own error hints if given."""
    errors = [
        event.output
        for episode, _ in labelled
        for event in episode.tool_events
        if looks_like_error(event)
    ]
    hints = environment.recovery_hints if environment else None
    return evolve(current, label_statistics(labelled), errors, config, hints)
