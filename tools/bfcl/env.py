"""The BFCL v3 multi-turn environment on `bfcl-eval`'s executable backends and checker.

Every rollout gets fresh backend instances (never BFCL's process-wide instance cache), so
concurrent rollouts of one task share nothing. The backends' documented methods become
LangChain tools with JSON-Schema validation; model output reaches them only as validated
keyword arguments (BFCL's own executor `eval`s call strings; this environment does not).

The verifier replays the official checks turn by turn without stopping at the first
failure: the ground truth runs on its own fresh instances, and after every turn BFCL's
`state_checker` and `response_checker` compare them with the model's instances (snapshotted
at the end of that turn) and results. The reward is binary and equals the official
verdict: every turn with a non-empty ground truth must have calls, matching state and the
ground truth's results.

Two scorings. `official` (the `bfcl` environment; the default for reported numbers)
scores an episode exactly as `bfcl evaluate` does: every call reaches the backend with
its arguments as sent (the backends convert `'20000.0'` with `float()` where BFCL's docs
say `float`), a held-out function runs even before the turn that offers it (BFCL's
executor maps every method of the involved classes), and every turn of the published
ground truth counts. `strict` (`bfcl-strict`, for training rewards) validates arguments
against the documented schema before they run, executes only the tools offered at that
turn, and tags reference turns that break those rules `gt_error` and leaves them out.
The tools offered to the model each turn are BFCL's in both.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
from collections.abc import Callable
from functools import cache
from typing import Any, Literal

import jsonschema
from langchain_core.tools import BaseTool, StructuredTool, ToolException

from seal_graph.environment import Environment, EnvSession, Task
from seal_graph.errors import ConfigError
from seal_graph.records import Episode, ToolEvent, Verdict
from seal_graph.tools.bfcl import data
from seal_graph.tools.bfcl.schema import parameters_schema, parse_call

Scoring = Literal["official", "strict"]
#: What BFCL's executor checks of a call's arguments before running it: nothing.
UNCHECKED_ARGUMENTS = {"type": "object", "properties": {}, "additionalProperties": True}


def bfcl_result(method: Callable[..., Any], kwargs: dict[str, Any]) -> tuple[str, Exception | None]:
    """Call a backend method and format the result exactly as BFCL's executor does."""
    try:
        result = method(**kwargs)
    except Exception as exc:  # BFCL records a failed call as this string
        return f"Error during execution: {exc}", exc
    if isinstance(result, str):
        return result, None
    if isinstance(result, dict):
        try:
            return json.dumps(result), None
        except (TypeError, ValueError):
            return str(result), None
    return str(result), None


def instantiate(entry: dict[str, Any]) -> dict[str, Any]:
    """Fresh backend instances for an entry, loaded with its initial configuration."""
    from bfcl_eval.constants.executable_backend_config import (
        CLASS_FILE_PATH_MAPPING,
        STATELESS_CLASSES,
    )

    long_context = data.category_of(entry["id"]) == "long_context"
    instances = {}
    for class_name in entry["involved_classes"]:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
        instance = cls()
        if class_name not in STATELESS_CLASSES:
            config = copy.deepcopy(entry["initial_config"].get(class_name, {}))
            instance._load_scenario(config, long_context=long_context)
        instances[class_name] = instance
    return instances


def bound_methods(entry: dict[str, Any], instances: dict[str, Any]) -> dict[str, Any]:
    """Documented method name -> bound method on these instances."""
    return {
        doc["name"]: getattr(instances[class_name], doc["name"])
        for class_name in entry["involved_classes"]
        for doc in data.function_docs(class_name)
    }


class BFCLSession(EnvSession):
    """One rollout: fresh backends, their tools, per-turn results and state snapshots."""

    def __init__(self, task: Task, entry: dict[str, Any], scoring: Scoring) -> None:
        self.task, self.entry, self.scoring = task, entry, scoring
        self.instances = instantiate(entry)
        methods = bound_methods(entry, self.instances)
        self._pending: list[str] = []
        self.results_by_turn: list[list[str]] = []
        self.snapshots: list[dict[str, Any]] = []
        self._held_out = {n for names in task.tools_added_at_turn.values() for n in names}
        docs = [doc for name in entry["involved_classes"] for doc in data.function_docs(name)]
        self._tools = {
            d["name"]: self._tool(d, methods[d["name"]], parameters_schema(d)) for d in docs
        }
        self._unchecked = (  # only official scoring runs calls on these
            [self._tool(d, methods[d["name"]], UNCHECKED_ARGUMENTS) for d in docs]
            if scoring == "official"
            else []
        )

    def _tool(self, doc: dict[str, Any], method: Callable[..., Any], schema: dict) -> BaseTool:
        def run(**kwargs: Any) -> str:
            text, error = bfcl_result(method, kwargs)
            self._pending.append(text)
            if error is not None:
                raise ToolException(text)
            return text

        return StructuredTool(
            name=doc["name"], description=doc["description"], args_schema=schema, func=run
        )

    def tools(self, turn: int) -> list[BaseTool]:
        added = {
            n for at, names in self.task.tools_added_at_turn.items() if at <= turn for n in names
        }
        return [
            tool
            for name, tool in self._tools.items()
            if name not in self._held_out or name in added
        ]

    def executable_tools(self, turn: int) -> list[BaseTool]:
        """Official scoring runs what BFCL's executor runs: any documented method, with
        its arguments unchecked; strict scoring, the offered tools with their schemas."""
        return self._unchecked if self.scoring == "official" else self.tools(turn)

    def end_turn(self, turn: int, events: list[ToolEvent]) -> None:
        self.results_by_turn.append(self._pending)
        self._pending = []
        self.snapshots.append(copy.deepcopy(self.instances))

    def verify(self, episode: Episode) -> Verdict:
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import (
            response_checker,
            state_checker,
        )

        gt_instances = instantiate(self.entry)
        gt_methods = bound_methods(self.entry, gt_instances)
        model_results: list[str] = []
        evidence = []
        for turn, gt_calls in enumerate(self.entry["ground_truth"]):
            calls = [
                e for e in episode.tool_events if e.turn == turn and e.error_kind != "parse_error"
            ]
            model_results += self.results_by_turn[turn] if turn < len(self.results_by_turn) else []
            item: dict[str, Any] = {
                "turn": turn,
                "ground_truth": gt_calls,
                "model_calls": len(calls),
            }
            parsed = [parse_call(c, gt_methods) for c in gt_calls]
            gt_results = [bfcl_result(gt_methods[name], kwargs)[0] for name, kwargs in parsed]
            invalid = self._invalid_reference(turn, parsed) if self.scoring == "strict" else ""
            if invalid:
                # The dataset's own answer breaks the tools it publishes (a tool held out
                # at this turn, a value of the wrong type): no policy can match it here.
                item.update(tag="gt_error", error=invalid)
            elif not gt_calls:
                item.update(tag="spurious_tool_call" if calls else "correct_abstention")
            elif not calls:
                item.update(tag="empty_turn_model_response")
            else:
                item.update(
                    self._compare(
                        turn,
                        gt_instances,
                        gt_results,
                        model_results,
                        state_checker,
                        response_checker,
                    )
                )
            evidence.append(item)
        # As the official checker: every turn with a ground truth must pass (strict
        # scoring reports turns whose ground truth breaks its rules and leaves them out).
        checked = [e for e in evidence if e["ground_truth"] and e["tag"] != "gt_error"]
        success = all(e["tag"] == "pass" for e in checked)
        first = next((e for e in checked if e["tag"] != "pass"), None)
        return Verdict(
            reward=float(success),
            success=success,
            turn_evidence=evidence,
            details={
                "first_failure": first and {"turn": first["turn"], "tag": first["tag"]},
                "gt_error_turns": [e["turn"] for e in evidence if e["tag"] == "gt_error"],
            },
        )

    def _invalid_reference(self, turn: int, parsed: list[tuple[str, dict[str, Any]]]) -> str:
        """Why the reference calls of a turn are not valid calls of this turn's tools."""
        available = {tool.name: tool for tool in self.tools(turn)}
        for name, kwargs in parsed:
            if name not in available:
                return f"reference calls {name!r}, which is not available at turn {turn}"
            try:
                jsonschema.validate(kwargs, available[name].args_schema)
            except jsonschema.ValidationError as exc:
                return f"reference call {name}({kwargs}) breaks its schema: {exc.message}"
        return ""

    def _compare(
        self,
        turn: int,
        gt_instances: dict[str, Any],
        gt_results: list[str],
        model_results: list[str],
        state_checker: Callable[..., dict],
        response_checker: Callable[..., dict],
    ) -> dict[str, Any]:
        snapshot = self.snapshots[turn] if turn < len(self.snapshots) else self.instances
        try:
            state = state_checker(snapshot, gt_instances)
            if not state["valid"]:
                diffs = state["details"]["differences"]
                return {
                    "tag": "instance_mismatch",
                    "differences": json.loads(json.dumps(diffs, default=str)),
                }
            response = response_checker(model_results, gt_results, turn)
        except Exception as exc:  # the official checker itself failed on this turn
            return {"tag": "checker_error", "error": f"{type(exc).__name__}: {exc}"}
        if not response["valid"]:
            return {"tag": "response_mismatch", "missing": response["details"]["missing_items"]}
        return {"tag": "pass"}


def _task(entry: dict[str, Any]) -> Task:
    missed = {int(turn): names for turn, names in entry.get("missed_function", {}).items()}
    turns = [
        data.ADDED_FUNCTIONS_PROMPT
        if index in missed and not messages
        else "\n".join(m["content"] for m in messages)
        for index, messages in enumerate(entry["question"])
    ]
    classes = entry["involved_classes"]
    signatures = {
        doc["name"]: _unbound(class_name, doc["name"])
        for class_name in classes
        for doc in data.function_docs(class_name)
    }
    reference = [
        [dict(zip(("name", "args"), parse_call(call, signatures), strict=True)) for call in calls]
        for calls in entry["ground_truth"]
    ]
    return Task(
        id=entry["id"],
        turns=turns,
        tools_added_at_turn=missed,
        reference=reference,
        metadata={"category": data.category_of(entry["id"]), "involved_classes": classes},
    )


def _unbound(class_name: str, method: str) -> Callable[..., Any]:
    """A method with `self` dropped from its signature (to name positional arguments)."""
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    function = getattr(
        getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name), method
    )
    params = list(inspect.signature(function).parameters.values())[1:]

    def stub(*args: Any, **kwargs: Any) -> None: ...

    stub.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return stub


class BFCLEnv(Environment):
    """BFCL v3 multi-turn: 800 tasks, the paper's 400/400 split, the official checker."""

    tool_timeout_s = 30.0

    def __init__(self, scoring: Scoring = "official") -> None:
        data.require_bfcl()
        self.scoring = scoring
        self.name = "bfcl" if scoring == "official" else f"bfcl-{scoring}"

    def splits(self) -> list[str]:
        return ["train", "test", "all"]

    def tasks(self, split: str = "train") -> list[Task]:
        return [self.task(task_id) for task_id in data.select_ids(split)]

    def task(self, task_id: str) -> Task:
        return _cached_task(task_id)

    def open(self, task: Task) -> BFCLSession:
        return BFCLSession(task, data.entries()[task.id], self.scoring)


@cache
def _cached_task(task_id: str) -> Task:
    entry = data.entries().get(task_id)
    if entry is None:
        raise ConfigError(f"BFCL has no multi-turn task {task_id!r}")
    return _task(entry)


def make_env() -> BFCLEnv:
    """`bfcl`: scored as `bfcl evaluate` scores (report these numbers)."""
    return BFCLEnv("official")


def make_strict_env() -> BFCLEnv:
    """`bfcl-strict`: arguments checked against the docs, tools only once offered."""
    return BFCLEnv("strict")
