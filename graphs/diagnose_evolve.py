"""The diagnose → evolve graph: label a batch of stored episodes, evolve the interface.

    load_batch → diagnose → aggregate → propose → commit → END

It reads the episodes of one run that were rolled out under the run's current interface
version, labels every turn (deterministic rules; optionally an LLM judge for turns no
evidence supports), stores the labels, aggregates label statistics, proposes the next
interface version and commits it when it differs. The output is a human-readable account
of what changed and why.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, NotRequired

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import TypedDict

from seal_graph import evolution, registry
from seal_graph.diagnosis import label_statistics
from seal_graph.errors import ConfigError
from seal_graph.interface import BASE_INTERFACE, InterfaceConfig, InterfaceVersion
from seal_graph.records import Episode, TurnDiagnosis
from seal_graph.settings import JudgeSettings
from seal_graph.store import TraceStore


class EvolveContext(BaseModel):
    """Settings of interface evolution (LangGraph Studio renders every description)."""

    config: InterfaceConfig = Field(
        default_factory=InterfaceConfig,
        description="Switches and thresholds of interface evolution (the paper's values).",
    )
    judge: JudgeSettings = Field(
        default_factory=JudgeSettings,
        description="Optional LLM judge for `unverified` turns (empty base_url = none).",
    )


def _ctx(runtime: Runtime[EvolveContext]) -> EvolveContext:
    """The run's context; defaults when none was given (e.g. a bare `graph.invoke`)."""
    return runtime.context or EvolveContext()


@with_config(ConfigDict(use_attribute_docstrings=True))
class EvolveInput(TypedDict):
    """Which stored batch to diagnose."""

    store_path: str
    """Path of the SQLite trace store."""
    run_id: str
    """Run whose episodes to read."""
    interface_version: NotRequired[int]
    """Batch = episodes rolled out under this version (default: the one the batch ran
    under, else the latest)."""


@with_config(ConfigDict(use_attribute_docstrings=True))
class EvolveOutput(TypedDict):
    """What the cycle found and changed."""

    label_table: list[dict[str, Any]]
    """Per label: count, prevalence, mean reward."""
    previous_version: int
    """Interface version the batch ran under."""
    version: int
    """Interface version after this cycle."""
    changed: bool
    """Whether a new version was committed."""
    summary: str
    """What changed and why."""
    labels_written: bool
    """Whether the labels were stored: never over labels the batch already has (a
    training run's diagnose stage wrote them)."""
    interface_written: bool
    """Whether the new version was stored (in the run's lineage: a training run's
    batch `RUN/itN` evolves `RUN`'s interfaces); never over a version already stored."""


@with_config(ConfigDict(use_attribute_docstrings=True))
class EvolveState(EvolveInput, EvolveOutput, total=False):
    """Everything the cycle carries between nodes (checkpointed)."""

    episodes: list[dict[str, Any]]
    """The batch (`Episode` dicts)."""
    diagnoses: dict[str, list[dict[str, Any]]]
    """Turn labels per episode id."""
    current: dict[str, Any]
    """The interface version the batch ran under."""
    lineage: str
    """Whose interface versions the batch evolves (`TraceStore.interface_lineage`)."""
    proposed: dict[str, Any]
    """The proposed next version."""


def _store(state: EvolveState) -> TraceStore:
    if not os.path.exists(state["store_path"]):
        raise ConfigError(f"no trace store at {state['store_path']}")
    return TraceStore(state["store_path"])


def load_batch(state: EvolveState) -> dict[str, Any]:
    store = _store(state)
    try:
        lineage = store.interface_lineage(state["run_id"])  # a training run's, for its batches
        current = store.latest_interface(lineage)
        rolled = store.rolled_interface_versions(state["run_id"])
        # default: the version the batch ran under (a training batch's is not the latest)
        version = state.get("interface_version", rolled[0] if len(rolled) == 1 else current.version)
        versions = {BASE_INTERFACE.version: BASE_INTERFACE}  # never stored, always there
        versions |= {v.version: v for v in store.interfaces(lineage)}
        current = versions.get(version, current)
        episodes = store.episodes(state["run_id"], interface_version=version)
    finally:
        store.close()
    if not episodes:
        hint = (
            f"; its episodes ran under version(s) {', '.join(map(str, rolled))}: diagnose "
            f"one of those (--interface-version {rolled[-1]}), or roll out a batch under "
            f"version {version} first (it was committed by an earlier evolve)"
            if rolled
            else "; it has no episodes at all: roll out a batch first"
        )
        raise ConfigError(
            f"run {state['run_id']!r} has no episodes under interface version "
            f"{version} in {state['store_path']}{hint}"
        )
    return {
        "episodes": [e.model_dump() for e in episodes],
        "current": current.model_dump(),
        "previous_version": current.version,
        "lineage": lineage,
    }


async def diagnose(state: EvolveState, runtime: Runtime[EvolveContext]) -> dict[str, Any]:
    """Label the batch with the loop's own code; store the labels only where the batch
    has none yet (a training run's labels are never overwritten)."""
    episodes = [Episode.model_validate(data) for data in state["episodes"]]
    store = await asyncio.to_thread(_store, state)  # file I/O: off the event loop
    try:
        stored = await asyncio.to_thread(store.labels, state["run_id"])
        kept = any(e.episode_id in stored for e in episodes)
        # first use imports the environment and reads its data: off the event loop
        environment = await asyncio.to_thread(registry.environment_of, episodes)
        labelled = await evolution.diagnose(
            episodes,
            registry.task_of,
            registry.judge_model(_ctx(runtime).judge),
            None if kept else store,
            environment,
        )
    finally:
        await asyncio.to_thread(store.close)
    return {
        "diagnoses": {
            e.episode_id: [d.model_dump() for d in diagnoses] for e, diagnoses in labelled
        },
        "labels_written": not kept,
    }


def aggregate(state: EvolveState) -> dict[str, Any]:
    stats = label_statistics(_pairs(state))
    return {"label_table": [s.model_dump() for s in stats.values()]}


def propose(state: EvolveState, runtime: Runtime[EvolveContext]) -> dict[str, Any]:
    current = InterfaceVersion.model_validate(state["current"])
    pairs = _pairs(state)
    environment = registry.environment_of([episode for episode, _ in pairs])
    proposed = evolution.propose(current, pairs, _ctx(runtime).config, environment)
    changed = proposed.version != current.version
    return {
        "proposed": proposed.model_dump(),
        "changed": changed,
        "version": proposed.version,
        "summary": proposed.summary if changed else "no change",
    }


def commit(state: EvolveState) -> dict[str, Any]:
    """Store the new version in the batch's lineage, unless that version number is taken
    (a training run evolved on from this batch: its interfaces are never replaced)."""
    if not state["changed"]:
        return {"interface_written": False}
    store = _store(state)
    try:
        taken = {v.version for v in store.interfaces(state["lineage"])}
        proposed = InterfaceVersion.model_validate(state["proposed"])
        if proposed.version in taken:
            return {"interface_written": False}
        store.save_interface(state["lineage"], proposed)
    finally:
        store.close()
    return {"interface_written": True}


def _pairs(state: EvolveState) -> list[tuple[Episode, list[TurnDiagnosis]]]:
    return [
        (
            Episode.model_validate(data),
            [TurnDiagnosis.model_validate(d) for d in state["diagnoses"][data["episode_id"]]],
        )
        for data in state["episodes"]
    ]


builder = StateGraph(
    EvolveState, input_schema=EvolveInput, output_schema=EvolveOutput, context_schema=EvolveContext
)
for node in (load_batch, diagnose, aggregate, propose, commit):
    builder.add_node(node.__name__, node)
builder.add_edge(START, "load_batch")
builder.add_edge("load_batch", "diagnose")
builder.add_edge("diagnose", "aggregate")
builder.add_edge("aggregate", "propose")
builder.add_edge("propose", "commit")
builder.add_edge("commit", END)

graph = builder.compile(name="diagnose_evolve")
