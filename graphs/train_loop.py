"""The closed training loop as a LangGraph graph, checkpointed between stages.

    baseline_eval → warm_start → rollout → diagnose → evolve → train → swap → evaluate → finish
                      ↑__________________________________________________|  → report

Killed at any point, the run resumes from the last completed node (`seal-graph train
--resume`): stored episodes are kept (the rollout stage skips them), and at most the
interrupted stage is recomputed. The state holds all the progress a resume needs —
policy version trained and served, the swap probe, the interface, the algorithm's own
progress (rho, optimiser state file, failure-agent versions). The live objects (policy,
server endpoint, store, the algorithm) come through the runtime context (`LoopContext`),
built by `seal-graph train` (`training/run.py`). What differs between algorithms is
behind `training.algorithms.Algorithm`; no node branches on an algorithm's name.
"""

from __future__ import annotations

import operator
import time
from typing import Annotated, Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from pydantic import BaseModel, ConfigDict, Field, with_config
from pydantic.json_schema import SkipJsonSchema
from typing_extensions import TypedDict

from seal_graph.errors import ConfigError
from seal_graph.interface import BASE_INTERFACE, InterfaceVersion
from seal_graph.training import loop
from seal_graph.training.console import console
from seal_graph.training.metrics import IterationMetrics, history_of
from seal_graph.training.report import write_report
from seal_graph.training.resources import LoopRun
from seal_graph.training.weight_sync import Probe


class LoopContext(BaseModel):
    """The run's live objects (LangGraph Studio shows the loop; `seal-graph train` runs it)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run: SkipJsonSchema[Any] = Field(
        default=None,
        exclude=True,
        description="The `LoopRun` (policy, server endpoint, store, algorithm), opened by "
        "`seal_graph.training.run.run_training`.",
    )


def _run(runtime: Runtime[LoopContext]) -> LoopRun:
    run = runtime.context.run if runtime.context is not None else None
    if run is None:
        raise ConfigError(
            "the train loop needs a live run (policy, model server, trace store): start it "
            "with `seal-graph train` (or seal_graph.training.run.run_training); LangGraph "
            "Studio shows its stages and a run's checkpoints, it cannot host the trainer."
        )
    return run


@with_config(ConfigDict(use_attribute_docstrings=True))
class LoopInput(TypedDict):
    """Which run to drive."""

    run_dir: str
    """Run directory (traces, adapters, metrics, report)."""


@with_config(ConfigDict(use_attribute_docstrings=True))
class LoopOutput(TypedDict, total=False):
    """The run's history and report."""

    history: list[dict[str, Any]]
    """Per-iteration metrics (`IterationMetrics` as dicts)."""
    report_path: str
    """Markdown report."""


@with_config(ConfigDict(use_attribute_docstrings=True))
class LoopState(LoopInput, LoopOutput, total=False):
    """Progress of the run (checkpointed): everything a resume needs."""

    iteration: int
    """Iterations finished so far (the one in progress is number `iteration + 1`, as the
    console, the report and the store's batch ids `RUN/itN` number it)."""
    policy_version: int
    """Optimiser steps the policy has taken (its saved adapter is `adapters/step-N`)."""
    served_version: int
    """Policy version the server answers with."""
    probe: dict[str, Any] | None
    """The swap probe (`Probe`): a served call of the last trained batch."""
    algorithm: dict[str, Any]
    """The algorithm's own progress (`Algorithm.initial_state`)."""
    interface: dict[str, Any]
    """Current training interface (`InterfaceVersion`)."""
    baseline: dict[str, Any]
    """Evaluation before any training."""
    warm_start: dict[str, Any]
    """The supervised warm start and the evaluation after it."""
    current: Annotated[dict[str, Any], lambda old, new: {**(old or {}), **new} if new else {}]
    """Metrics of the iteration in progress, stage by stage."""
    history: Annotated[list[dict[str, Any]], operator.add]


HEADLINES = {
    "rollout": ("episodes", "train_success", "rollout_failures"),
    "diagnose": ("label_counts", "tag_counts"),
    "evolve": ("version", "change"),
    "train": ("samples", "loss", "zero_signal_groups", "reweighted_share", "tokens_per_second"),
    "swap": ("version", "ok", "mean_logprob_diff", "note", "error"),
    "evaluate": ("success", "ci", "episodes"),
}
"""What each stage's console line shows (everything else is in metrics.jsonl)."""


def _stage(state: LoopState, name: str, metrics: dict[str, Any], began: float) -> dict[str, Any]:
    """The stage's metrics into the iteration's record, with its wall time since `began`."""
    metrics["wall_seconds"] = time.perf_counter() - began
    console.print(  # numbered from 1, as the report numbers iterations
        f"[bold]iteration {state.get('iteration', 0) + 1}[/] {name}: "
        f"{_brief(metrics, HEADLINES.get(name, ()))} ({metrics['wall_seconds']:.1f} s)"
    )
    return {"current": {name: metrics}}


def _brief(metrics: dict[str, Any], keys: tuple[str, ...]) -> str:
    """A stage's headline numbers on one line; counts (diagnose's labels and tags) as
    `name n`, shares as percentages."""
    parts = []
    for key in keys:
        value = metrics.get(key)
        if value is None:
            continue
        if key.endswith("_counts") and isinstance(value, dict):
            counts = sorted(value.items(), key=lambda item: -item[1])
            parts.append(
                f"{key.removesuffix('_counts')}s: " + ", ".join(f"{k} {n}" for k, n in counts)
            )
        elif key.endswith(("_share", "success")) and isinstance(value, float):
            parts.append(f"{key}={value:.0%}")
        elif isinstance(value, float):
            parts.append(f"{key}={value:.3g}")
        elif isinstance(value, list | tuple):
            parts.append(f"{key}=[{', '.join(f'{v:.0%}' for v in value)}]")
        else:
            parts.append(f"{key}={value}")
    return ", ".join(parts)


def _probe(state: LoopState) -> Probe | None:
    return Probe.model_validate(state["probe"]) if state.get("probe") else None


def baseline_eval(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    run = _run(runtime)
    start = {
        "iteration": 0,
        "policy_version": 0,
        "served_version": 0,
        "probe": None,
        "algorithm": run.algorithm.initial_state(),
        "interface": BASE_INTERFACE.model_dump(),
    }
    if not run.config.eval.baseline:
        return {"baseline": {}, **start}
    result = loop.evaluate(run, loop.BASELINE, 0)
    console.print(
        f"[bold]baseline[/] success on {run.config.eval.split}: "
        f"{result['success']:.0%} ({result['episodes']} tasks)"
    )
    return {"baseline": result, **start}


def warm_start(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    run = _run(runtime)
    if run.config.warm_start.epochs == 0:
        return {}
    metrics = loop.warm_start(run)
    if metrics.get("skipped"):
        return {}
    extra, updates = run.algorithm.after_warm_start(run, state["algorithm"])
    served = run.policy.version if metrics["swap_ok"] else 0
    after = loop.evaluate(run, loop.WARM_START, served)
    console.print(
        f"[bold]warm start[/]: {metrics['episodes']} expert sequences x "
        f"{run.config.warm_start.epochs} epochs = {metrics['optimizer_steps']} steps "
        f"({metrics['seconds']:.0f} s); success now {after['success']:.0%}"
    )
    return {
        "warm_start": {
            **metrics,
            **extra,
            "eval_success": after["success"],
            "eval_per_task": after["per_task"],  # the final evaluation pairs with it
            "eval_abstention": after["abstention"],
        },
        "policy_version": run.policy.version,
        "served_version": served,
        "algorithm": {**state["algorithm"], **updates},
    }


def rollout(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    began = time.perf_counter()
    run = _run(runtime)
    interface = InterfaceVersion.model_validate(state["interface"])
    metrics = loop.rollout(run, state["iteration"], interface, state["served_version"])
    metrics.update(run.algorithm.rollout(run, state["iteration"], interface, state["algorithm"]))
    return _stage(state, "rollout", metrics, began)


def diagnose(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    began = time.perf_counter()
    return _stage(state, "diagnose", loop.diagnose(_run(runtime), state["iteration"]), began)


def evolve(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    began = time.perf_counter()
    run = _run(runtime)
    current = InterfaceVersion.model_validate(state["interface"])
    pairs = loop.labelled_batch(run, state["iteration"])
    proposed, metrics = loop.evolve_interface(run, state["iteration"], current, pairs)
    return {**_stage(state, "evolve", metrics, began), "interface": proposed.model_dump()}


def train(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    run = _run(runtime)
    began = time.perf_counter()
    pairs = loop.labelled_batch(run, state["iteration"])
    result = run.algorithm.train(run, state["iteration"], pairs, state["algorithm"])
    metrics = {**result.metrics, "seconds": time.perf_counter() - began}
    update: dict[str, Any] = {
        **_stage(state, "train", metrics, began),
        "policy_version": run.policy.version,
        "algorithm": {**state["algorithm"], **result.state},
    }
    if result.probe is not None:
        update["probe"] = result.probe.model_dump()
    return update


def swap(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    began = time.perf_counter()
    run = _run(runtime)
    probe = _probe(state)
    other, updates = run.algorithm.swap(run, state["algorithm"], probe)
    if other is not None:
        console.print(f"failure agent swap: {other}")
    update: dict[str, Any] = {"algorithm": {**state["algorithm"], **updates}}
    version = state["policy_version"]
    if version == state["served_version"]:
        metrics = {"ok": True, "seconds": 0.0, "note": "no new weights"}
        return {**update, **_stage(state, "swap", metrics, began)}
    metrics = {"version": f"step-{version}", **loop.swap(run, version, probe)}
    served = version if metrics["ok"] else state["served_version"]
    return {**update, **_stage(state, "swap", metrics, began), "served_version": served}


def evaluate(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    began = time.perf_counter()
    run = _run(runtime)
    settings = run.config.eval
    last = state["iteration"] + 1 == run.config.iterations
    if not settings.due(state["iteration"], run.config.iterations):
        return {}
    metrics = loop.evaluate(run, state["iteration"], state["served_version"])
    if last:
        metrics["splits"] = {
            split: loop.evaluate(run, state["iteration"], state["served_version"], split)
            for split in settings.final_splits
        }
    return _stage(state, "evaluate", metrics, began)


def finish(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    record = IterationMetrics.model_validate(
        {
            "iteration": state["iteration"] + 1,  # from 1, as the console and report
            "policy_version": state["served_version"],
            "interface_version": state["interface"]["version"],
            **state["current"],
        }
    ).model_dump(mode="json")
    _run(runtime).log_metrics(record)
    return {"history": [record], "iteration": state["iteration"] + 1, "current": None}


def report(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    path = write_report(
        _run(runtime),
        state.get("baseline", {}),
        state.get("warm_start", {}),
        history_of(state["history"]),
        InterfaceVersion.model_validate(state["interface"]),
    )
    console.print(f"[bold green]report[/]: {path}")
    return {"report_path": str(path)}


def next_step(state: LoopState, runtime: Runtime[LoopContext]) -> Literal["rollout", "report"]:
    return "rollout" if state["iteration"] < _run(runtime).config.iterations else "report"


builder = StateGraph(
    LoopState, input_schema=LoopInput, output_schema=LoopOutput, context_schema=LoopContext
)
for node in (
    baseline_eval,
    warm_start,
    rollout,
    diagnose,
    evolve,
    train,
    swap,
    evaluate,
    finish,
    report,
):
    builder.add_node(node.__name__, node)
builder.add_edge(START, "baseline_eval")
builder.add_edge("baseline_eval", "warm_start")
builder.add_edge("warm_start", "rollout")
builder.add_edge("rollout", "diagnose")
builder.add_edge("diagnose", "evolve")
builder.add_edge("evolve", "train")
builder.add_edge("train", "swap")
builder.add_edge("swap", "evaluate")
builder.add_edge("evaluate", "finish")
builder.add_conditional_edges("finish", next_step)
builder.add_edge("report", END)

graph = builder.compile(name="train_loop")
