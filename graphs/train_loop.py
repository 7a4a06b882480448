"""The closed training loop as a LangGraph graph, checkpointed between stages.

    baseline_eval → warm_start → rollout → diagnose → evolve → train → swap → evaluate → finish
                      ↑__________________________________________________|  → report

Killed at any point, the run resumes from the last completed node (`seal-graph train
--resume`): stored episodes are kept (the rollout stage skips them), and at most the
interrupted stage is recomputed. The nodes' live objects (policy, trainer, server
endpoint) are found by run directory in `seal_graph.training.resources`.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from seal_graph.interface import BASE_INTERFACE, InterfaceVersion
from seal_graph.training import dpo_loop, loop
from seal_graph.training.config import DPO_ALGOS
from seal_graph.training.report import write_report
from seal_graph.training.resources import console, resources_for


class LoopInput(TypedDict):
    """Which run to drive."""

    run_dir: str
    """Run directory (traces, adapters, metrics, report)."""


class LoopOutput(TypedDict, total=False):
    """The run's history and report."""

    history: list[dict[str, Any]]
    """Per-iteration metrics."""
    report_path: str
    """Markdown report."""


class LoopState(LoopInput, LoopOutput, total=False):
    """Progress of the run (checkpointed)."""

    iteration: int
    """Current iteration (0-based)."""
    served_version: int
    """Policy version the server answers with."""
    interface: dict[str, Any]
    """Current training interface (`InterfaceVersion`)."""
    rho: dict[str, float]
    """Current (dynamic) rho."""
    baseline: dict[str, Any]
    """Evaluation before any training."""
    warm_start: dict[str, Any]
    """The supervised warm start and the evaluation after it."""
    current: Annotated[dict[str, Any], lambda old, new: {**(old or {}), **new} if new else {}]
    """Metrics of the iteration in progress, stage by stage."""
    history: Annotated[list[dict[str, Any]], operator.add]


def _stage(state: LoopState, name: str, metrics: dict[str, Any]) -> dict[str, Any]:
    seconds = metrics.get("seconds", 0.0)
    console.print(
        f"[bold]iteration {state.get('iteration', 0)}[/] {name}: "
        f"{_brief(metrics)} ({seconds:.1f} s)"
    )
    return {"current": {name: metrics}}


def _brief(metrics: dict[str, Any]) -> str:
    keys = [k for k, v in metrics.items() if isinstance(v, int | float | str) and k != "seconds"]
    return ", ".join(
        f"{k}={metrics[k]:.3g}" if isinstance(metrics[k], float) else f"{k}={metrics[k]}"
        for k in keys[:6]
    )


def baseline_eval(state: LoopState) -> dict[str, Any]:
    resources = resources_for(state["run_dir"])
    start = {
        "iteration": 0,
        "served_version": 0,
        "interface": BASE_INTERFACE.model_dump(),
        "rho": dict(resources.config.weighting.rho),
    }
    if not resources.config.eval.baseline:
        return {"baseline": {}, **start}
    result = loop.evaluate(resources, -1)
    console.print(
        f"[bold]baseline[/] success on {resources.config.eval.split}: "
        f"{result['success']:.0%} ({result['episodes']} tasks)"
    )
    return {"baseline": result, **start}


def warm_start(state: LoopState) -> dict[str, Any]:
    resources = resources_for(state["run_dir"])
    if resources.config.warm_start.steps == 0:
        return {}
    metrics = loop.warm_start(resources)
    if metrics.get("skipped"):
        return {}
    if resources.failure is not None:
        metrics["failure_agent_seeded"] = dpo_loop.seed_failure_agent(resources)["ok"]
    after = loop.evaluate(resources, -2)
    console.print(
        f"[bold]warm start[/]: {metrics['examples']} expert examples, "
        f"{resources.config.warm_start.steps} steps ({metrics['seconds']:.0f} s); "
        f"success now {after['success']:.0%}"
    )
    return {
        "warm_start": {**metrics, "eval_success": after["success"]},
        "served_version": resources.policy.version if metrics["swap_ok"] else 0,
    }


def rollout(state: LoopState) -> dict[str, Any]:
    resources = resources_for(state["run_dir"])
    interface = InterfaceVersion.model_validate(state["interface"])
    metrics = loop.rollout(resources, state["iteration"], interface, state["served_version"])
    if resources.failure is not None:
        failure = dpo_loop.failure_rollout(resources, state["iteration"], interface)
        console.print(
            f"[bold]iteration {state['iteration']}[/] failure agent: success "
            f"{failure['success']:.0%}, mean progress of its failures "
            f"{failure['mean_failure_progress']:.2f} ({failure['seconds']:.1f} s)"
        )
        metrics["failure_agent"] = failure
    return _stage(state, "rollout", metrics)


def diagnose(state: LoopState) -> dict[str, Any]:
    return _stage(
        state, "diagnose", loop.diagnose(resources_for(state["run_dir"]), state["iteration"])
    )


def evolve(state: LoopState) -> dict[str, Any]:
    resources = resources_for(state["run_dir"])
    current = InterfaceVersion.model_validate(state["interface"])
    pairs = loop.labelled_batch(resources, state["iteration"])
    proposed, metrics = loop.evolve_interface(resources, state["iteration"], current, pairs)
    return {**_stage(state, "evolve", metrics), "interface": proposed.model_dump()}


def train(state: LoopState) -> dict[str, Any]:
    resources = resources_for(state["run_dir"])
    if resources.config.algo in DPO_ALGOS:
        return _stage(state, "train", dpo_loop.train(resources, state["iteration"]))
    pairs = loop.labelled_batch(resources, state["iteration"])
    rho, metrics = loop.train(resources, state["iteration"], pairs, state["rho"])
    return {**_stage(state, "train", metrics), "rho": rho}


def swap(state: LoopState) -> dict[str, Any]:
    resources = resources_for(state["run_dir"])
    failure = resources.failure
    if failure is not None and failure.version != resources.failure_served:
        console.print(f"failure agent swap: {dpo_loop.swap_failure(resources)}")
    version = resources.policy.version
    if version == state["served_version"]:
        return _stage(state, "swap", {"ok": True, "seconds": 0.0, "note": "no new weights"})
    metrics = loop.swap(resources, version, resources.probe)
    served = version if metrics["ok"] else state["served_version"]
    return {**_stage(state, "swap", metrics), "served_version": served}


def evaluate(state: LoopState) -> dict[str, Any]:
    resources = resources_for(state["run_dir"])
    settings = resources.config.eval
    last = state["iteration"] + 1 == resources.config.iterations
    if (state["iteration"] + 1) % settings.every and not last:
        return {}
    metrics = loop.evaluate(resources, state["iteration"])
    if last:
        for split in settings.final_splits:
            metrics[f"{split}_success"] = loop.evaluate(resources, state["iteration"], split)[
                "success"
            ]
    return _stage(state, "evaluate", metrics)


def finish(state: LoopState) -> dict[str, Any]:
    resources = resources_for(state["run_dir"])
    record = {
        "iteration": state["iteration"],
        "policy_version": state["served_version"],
        "interface_version": state["interface"]["version"],
        **state["current"],
    }
    resources.log_metrics(record)
    return {"history": [record], "iteration": state["iteration"] + 1, "current": None}


def report(state: LoopState) -> dict[str, Any]:
    resources = resources_for(state["run_dir"])
    path = write_report(
        resources,
        state.get("baseline", {}),
        state.get("warm_start", {}),
        state["history"],
        InterfaceVersion.model_validate(state["interface"]),
    )
    console.print(f"[bold green]report[/]: {path}")
    return {"report_path": str(path)}


def next_step(state: LoopState) -> Literal["rollout", "report"]:
    config = resources_for(state["run_dir"]).config
    return "rollout" if state["iteration"] < config.iterations else "report"


builder = StateGraph(LoopState, input_schema=LoopInput, output_schema=LoopOutput)
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
