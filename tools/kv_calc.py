"""`kv-calc`: a small built-in environment for CPU-scale runs, made the way a user makes one.

Five LangChain tools over a per-rollout key-value store (set, get, list, add, multiply),
multi-turn tasks generated from a seed, a reference solution per turn, and a verifier
that checks the store after every turn against the reference's store. Prompts stay short
(~500 tokens) so the bundled 135M model can be trained on two CPU cores.
"""

from __future__ import annotations

import random
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from seal_graph.environment import Task
from seal_graph.records import Episode, ToolEvent, Verdict
from seal_graph.tools.langchain_env import LangChainToolEnv, from_langchain_tools

SYSTEM_PROMPT = (
    "You manage a key-value store of numbers. Use the tools to do exactly what the user "
    "asks, one step at a time. When the request is done, answer briefly."
)
_KEYS = ["apples", "pears", "budget", "score", "total", "rent", "miles", "stock"]


class KVState:
    """One rollout's store, plus its snapshot after every turn for the verifier."""

    def __init__(self) -> None:
        self.store: dict[str, float] = {}
        self.after_turn: list[dict[str, float]] = []


def make_tools(state: KVState) -> list[BaseTool]:
    """The tools, bound to one rollout's state."""

    def set_value(key: str, value: float) -> str:
        """Store a number under a key, replacing any previous value."""
        state.store[key] = float(value)
        return f"{key} = {state.store[key]:g}"

    def get_value(key: str) -> float:
        """Return the number stored under a key."""
        if key not in state.store:
            raise KeyError(f"no value stored under {key!r}")
        return state.store[key]

    def list_keys() -> list[str]:
        """List the keys that hold a value."""
        return sorted(state.store)

    def add(a: float, b: float) -> float:
        """Return a + b."""
        return a + b

    def multiply(a: float, b: float) -> float:
        """Return a * b."""
        return a * b

    return [
        StructuredTool.from_function(fn) for fn in (set_value, get_value, list_keys, add, multiply)
    ]


def _task(rng: random.Random, task_id: str) -> Task:
    """Two or three turns: store values, then combine them with a calculation."""
    k1, k2, k3 = rng.sample(_KEYS, 3)
    a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(2, 9)
    turns = [f"Store {a} under the key '{k1}'."]
    reference: list[list[dict[str, Any]]] = [
        [{"name": "set_value", "args": {"key": k1, "value": a}}]
    ]
    if rng.random() < 0.5:
        turns.append(f"Add {b} to the value of '{k1}' and store the result under '{k2}'.")
        reference.append(
            [
                {"name": "get_value", "args": {"key": k1}},
                {"name": "add", "args": {"a": a, "b": b}},
                {"name": "set_value", "args": {"key": k2, "value": a + b}},
            ]
        )
        result = a + b
    else:
        turns.append(f"Multiply the value of '{k1}' by {c} and store the result under '{k2}'.")
        reference.append(
            [
                {"name": "get_value", "args": {"key": k1}},
                {"name": "multiply", "args": {"a": a, "b": c}},
                {"name": "set_value", "args": {"key": k2, "value": a * c}},
            ]
        )
        result = a * c
    if rng.random() < 0.5:
        turns.append(f"Store the value of '{k2}' under '{k3}' as well.")
        reference.append(
            [
                {"name": "get_value", "args": {"key": k2}},
                {"name": "set_value", "args": {"key": k3, "value": result}},
            ]
        )
    return Task(id=task_id, turns=turns, system_prompt=SYSTEM_PROMPT, reference=reference)


def _chain_task(rng: random.Random, task_id: str) -> Task:
    """Out of distribution: four turns chaining both operations (training tasks use one)."""
    k1, k2, k3, k4 = rng.sample(_KEYS, 4)
    a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(2, 9)
    turns = [
        f"Store {a} under the key '{k1}'.",
        f"Add {b} to the value of '{k1}' and store the result under '{k2}'.",
        f"Multiply the value of '{k2}' by {c} and store the result under '{k3}'.",
        f"Store the value of '{k3}' under '{k4}' as well.",
    ]
    reference = [
        [{"name": "set_value", "args": {"key": k1, "value": a}}],
        [
            {"name": "get_value", "args": {"key": k1}},
            {"name": "add", "args": {"a": a, "b": b}},
            {"name": "set_value", "args": {"key": k2, "value": a + b}},
        ],
        [
            {"name": "get_value", "args": {"key": k2}},
            {"name": "multiply", "args": {"a": a + b, "b": c}},
            {"name": "set_value", "args": {"key": k3, "value": (a + b) * c}},
        ],
        [
            {"name": "get_value", "args": {"key": k3}},
            {"name": "set_value", "args": {"key": k4, "value": (a + b) * c}},
        ],
    ]
    return Task(id=task_id, turns=turns, system_prompt=SYSTEM_PROMPT, reference=reference)


def generate_tasks(count: int, seed: int, prefix: str, chained: bool = False) -> list[Task]:
    rng = random.Random(seed)
    make = _chain_task if chained else _task
    return [make(rng, f"{prefix}_{index}") for index in range(count)]


def reference_states(task: Task) -> list[dict[str, float]]:
    """The store after each turn when the reference solution runs."""
    store: dict[str, float] = {}
    states = []
    for calls in task.reference or []:
        for call in calls:
            if call["name"] == "set_value":
                store[call["args"]["key"]] = float(call["args"]["value"])
        states.append(dict(store))
    return states


def _snapshot(task: Task, state: KVState, turn: int, events: list[ToolEvent]) -> None:
    state.after_turn.append(dict(state.store))


def verify(task: Task, state: KVState, episode: Episode) -> Verdict:
    """Success iff the store matches the reference's store after every turn."""
    evidence = []
    for turn, expected in enumerate(reference_states(task)):
        actual = state.after_turn[turn] if turn < len(state.after_turn) else None
        evidence.append(
            {"turn": turn, "pass": actual == expected, "expected_state": expected, "state": actual}
        )
    success = bool(evidence) and all(item["pass"] for item in evidence)
    return Verdict(reward=float(success), success=success, turn_evidence=evidence)


def make_env(train: int = 64, test: int = 64, ood: int = 64) -> LangChainToolEnv:
    """The `kv-calc` environment: train and test tasks from different seeds, and an
    out-of-distribution split of longer chains combining both operations."""
    return from_langchain_tools(
        "kv-calc",
        tasks={
            "train": generate_tasks(train, seed=0, prefix="kv_train"),
            "test": generate_tasks(test, seed=1, prefix="kv_test"),
            "ood": generate_tasks(ood, seed=2, prefix="kv_ood", chained=True),
        },
        make_state=lambda task: KVState(),
        tools=make_tools,
        verify=verify,
        on_turn_end=_snapshot,
        tool_timeout_s=10.0,
    )
