"""`kv-calc`: a small built-in environment for CPU-scale runs, made the way a user makes one.

Five LangChain tools over a per-rollout key-value store (set, get, list, add, multiply),
multi-turn tasks generated from a seed, a reference solution per turn, and a verifier
that checks the store after every turn against the reference's store. Prompts stay short
(~500 tokens) so the bundled 135M model can be trained on two CPU cores.

Tasks come in BFCL's four multi-turn categories (`Task.metadata["category"]`), so the
per-turn tags SEAL weights by (METHOD.md) occur here as they do on BFCL:

* `base`: store a value, combine it with a calculation, maybe copy the result;
* `miss_param`: a turn leaves out a number the call needs. The right response asks for
  it and calls nothing; the next turn gives it;
* `miss_func`: a turn needs a tool that is not offered yet. The right response says so
  and calls nothing; the tool is offered from a later turn on (BFCL's held-out
  functions);
* `long_context`: the store starts with many unrelated keys, so listings are long, and
  none of them may change.

A turn whose right response is to call nothing (`Task.reference` has no calls there)
passes only when the agent calls nothing and the store is unchanged. Splits `train`,
`val` and `test` hold every category, from disjoint seeds and with no two tasks alike
across splits; `ood` holds four-turn chains of both operations (base-style).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from seal_graph.environment import Task
from seal_graph.records import Episode, ToolEvent, TurnEvidence, Verdict
from seal_graph.tools.langchain_env import LangChainToolEnv, from_langchain_tools

SYSTEM_PROMPT = (
    "You manage a key-value store of numbers. Use the tools to do exactly what the user "
    "asks, one step at a time. If a number you need is missing, or no tool can do it, "
    "say so and call nothing. When the request is done, answer briefly."
)
CATEGORIES = ("base", "miss_param", "miss_func", "long_context")
_KEYS = ["apples", "pears", "budget", "score", "total", "rent", "miles", "stock"]
_FILLER = ["bin", "lot", "crate", "shelf", "tray", "box", "rack", "slot"]

Calls = list[dict[str, Any]]


class KVState:
    """One rollout's store, plus its snapshot after every turn for the verifier."""

    def __init__(self, initial: dict[str, float] | None = None) -> None:
        self.store: dict[str, float] = dict(initial or {})
        self.after_turn: list[dict[str, float]] = []


def _functions(state: KVState) -> list[Callable[..., Any]]:
    """The tools' functions, bound to one rollout's state."""

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

    return [set_value, get_value, list_keys, add, multiply]


@functools.cache
def _schemas() -> dict[str, Any]:
    """Each tool's argument schema, built once: creating the pydantic model is most of a
    tool's cost, and every rollout (and every replayed reference) builds its own tools."""
    return {
        fn.__name__: StructuredTool.from_function(fn).args_schema for fn in _functions(KVState())
    }


def make_tools(state: KVState) -> list[BaseTool]:
    """The tools, bound to one rollout's state."""
    schemas = _schemas()
    return [
        StructuredTool.from_function(fn, args_schema=schemas[fn.__name__])
        for fn in _functions(state)
    ]


def _store(key: str, value: float) -> Calls:
    return [{"name": "set_value", "args": {"key": key, "value": value}}]


def _combine(op: str, key: str, value: float, operand: float, target: str) -> Calls:
    return [
        {"name": "get_value", "args": {"key": key}},
        {"name": op, "args": {"a": value, "b": operand}},
        {"name": "set_value", "args": {"key": target, "value": _apply(op, value, operand)}},
    ]


def _apply(op: str, a: float, b: float) -> float:
    return a + b if op == "add" else a * b


def _store_text(value: float, key: str) -> str:
    return f"Store {value} under the key '{key}'."


def _combine_text(op: str, operand: float | None, key: str, target: str) -> str:
    """The user's request for `op`; `operand` None leaves the number out (miss_param)."""
    amount = "a number" if operand is None else f"{operand}"
    if op == "add":
        return f"Add {amount} to the value of '{key}' and store the result under '{target}'."
    return f"Multiply the value of '{key}' by {amount} and store the result under '{target}'."


class _Draw:
    """The random choices of one task."""

    def __init__(self, rng: random.Random) -> None:  # draws in the order kv-calc always did
        self.keys = rng.sample(_KEYS, 3)
        self.a, self.b, self.c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(2, 9)
        self.op = "add" if rng.random() < 0.5 else "multiply"
        self.copy = rng.random() < 0.5
        self.rng = rng

    @property
    def operand(self) -> int:
        return self.b if self.op == "add" else self.c


def _base(draw: _Draw) -> tuple[list[str], list[Calls], list[str | None]]:
    """Store, combine, maybe copy: today's two- and three-turn tasks."""
    k1, k2, k3 = draw.keys
    turns = [_store_text(draw.a, k1), _combine_text(draw.op, draw.operand, k1, k2)]
    reference = [_store(k1, draw.a), _combine(draw.op, k1, draw.a, draw.operand, k2)]
    if draw.copy:
        turns.append(f"Store the value of '{k2}' under '{k3}' as well.")
        result = _apply(draw.op, draw.a, draw.operand)
        reference.append([{"name": "get_value", "args": {"key": k2}}, *_store(k3, result)])
    return turns, reference, [None] * len(turns)


MISSING_NUMBER = ("number", "value", "amount", "how much")
"""Words a reply to a `miss_param` abstention turn names the missing number with."""
MISSING_TOOL = {
    "add": ("add", "addition", "sum", "tool"),
    "multiply": ("multiply", "multiplication", "product", "tool"),
}
"""Words a reply to a `miss_func` abstention turn names the missing operation with."""


def _miss_param(
    draw: _Draw,
) -> tuple[list[str], list[Calls], list[str | None], dict[int, list[str]]]:
    """A number left out of one turn: ask, then act when the next turn gives it."""
    k1, k2, _ = draw.keys
    if draw.rng.random() < 0.5:  # the value to store is missing
        turns = [
            f"Store a number under the key '{k1}'.",
            f"Use {draw.a}.",
            _combine_text(draw.op, draw.operand, k1, k2),
        ]
        reference = [[], _store(k1, draw.a), _combine(draw.op, k1, draw.a, draw.operand, k2)]
        replies = [f"Which number should I store under '{k1}'?", None, None]
        abstains_at = 0
    else:  # the operand is missing
        turns = [
            _store_text(draw.a, k1),
            _combine_text(draw.op, None, k1, k2),
            f"Use {draw.operand}.",
        ]
        reference = [_store(k1, draw.a), [], _combine(draw.op, k1, draw.a, draw.operand, k2)]
        verb = "add" if draw.op == "add" else "multiply by"
        replies = [None, f"Which number should I {verb}?", None]
        abstains_at = 1
    return turns, reference, replies, {abstains_at: list(MISSING_NUMBER)}


def _miss_func(
    draw: _Draw,
) -> tuple[list[str], list[Calls], list[str | None], dict, dict[int, list[str]]]:
    """The turn's operation has no tool yet: say so; the tool arrives a turn later."""
    k1, k2, _ = draw.keys
    combine = _combine_text(draw.op, draw.operand, k1, k2)
    turns = [
        _store_text(draw.a, k1),
        combine,
        f"You can {draw.op} now. {combine}",
    ]
    reference = [_store(k1, draw.a), [], _combine(draw.op, k1, draw.a, draw.operand, k2)]
    replies = [None, f"I cannot {draw.op}: no tool for it is available.", None]
    return turns, reference, replies, {2: [draw.op]}, {1: list(MISSING_TOOL[draw.op])}


def _filler(rng: random.Random, count: int) -> dict[str, float]:
    names = [f"{rng.choice(_FILLER)}_{n:02d}" for n in rng.sample(range(100), count)]
    return {name: float(rng.randint(1, 99)) for name in names}


def _task(rng: random.Random, category: str, task_id: str) -> Task:
    draw = _Draw(rng)
    held_out: dict[int, list[str]] = {}
    missing: dict[int, list[str]] = {}
    initial: dict[str, float] = {}
    if category == "miss_param":
        turns, reference, replies, missing = _miss_param(draw)
    elif category == "miss_func":
        turns, reference, replies, held_out, missing = _miss_func(draw)
    else:
        turns, reference, replies = _base(draw)
        if category == "long_context":
            initial = _filler(rng, rng.randint(20, 30))
    metadata: dict[str, Any] = {"category": category}
    if missing:
        metadata["missing"] = missing
    if initial:
        metadata["initial_store"] = initial
    return Task(
        id=task_id,
        turns=turns,
        system_prompt=SYSTEM_PROMPT,
        reference=reference,
        reference_replies=replies,
        tools_added_at_turn=held_out,
        metadata=metadata,
    )


def _chain_task(rng: random.Random, category: str, task_id: str) -> Task:
    """Out of distribution: four turns chaining both operations (training tasks use one)."""
    k1, k2, k3, k4 = rng.sample(_KEYS, 4)
    a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(2, 9)
    turns = [
        _store_text(a, k1),
        _combine_text("add", b, k1, k2),
        _combine_text("multiply", c, k2, k3),
        f"Store the value of '{k3}' under '{k4}' as well.",
    ]
    reference = [
        _store(k1, a),
        _combine("add", k1, a, b, k2),
        _combine("multiply", k2, a + b, c, k3),
        [{"name": "get_value", "args": {"key": k3}}, *_store(k4, (a + b) * c)],
    ]
    return Task(
        id=task_id,
        turns=turns,
        system_prompt=SYSTEM_PROMPT,
        reference=reference,
        metadata={"category": "ood"},
    )


SPLIT_SEEDS = {"train": 0, "test": 1, "ood": 2, "val": 3}
"""One seed per split (`base` train and test are the tasks kv-calc always had)."""


def _task_id(split: str, category: str, index: int) -> str:
    return (
        f"kv_{split}_{index}" if category in ("base", "ood") else f"kv_{category}_{split}_{index}"
    )


def generate_split(
    split: str, count: int, categories: tuple[str, ...], seen: set[tuple[str, ...]]
) -> list[Task]:
    """`count` tasks of each category for a split; a task whose turns are already in
    `seen` (another split's) is drawn again, so splits never share a task."""
    make: Callable[[random.Random, str, str], Task] = _chain_task if split == "ood" else _task
    tasks = []
    for offset, category in enumerate(categories):
        seed = SPLIT_SEEDS[split]
        rng = random.Random(seed if category in ("base", "ood") else 1000 * seed + offset)
        made = 0
        while made < count:
            task = make(rng, category, _task_id(split, category, made))
            key = (*task.turns, str(task.metadata.get("initial_store", "")))
            if key in seen:
                continue
            seen.add(key)
            tasks.append(task)
            made += 1
    return tasks


def reference_states(task: Task) -> list[dict[str, float]]:
    """The store after each turn when the reference solution runs."""
    store: dict[str, float] = dict(task.metadata.get("initial_store", {}))
    states = []
    for calls in task.reference or []:
        for call in calls:
            if call["name"] == "set_value":
                store[call["args"]["key"]] = float(call["args"]["value"])
        states.append(dict(store))
    return states


def _snapshot(task: Task, state: KVState, turn: int, events: list[ToolEvent]) -> None:
    state.after_turn.append(dict(state.store))


def _turn_evidence(
    task: Task, state: KVState, turn: int, called: bool, expected: dict[str, float]
) -> TurnEvidence:
    """A turn passes iff the store matches `expected` (the reference's store after it),
    and a turn whose right response is no call (an abstention turn) made none."""
    actual = state.after_turn[turn] if turn < len(state.after_turn) else None
    expects_calls = bool((task.reference or [])[turn])
    return TurnEvidence(
        turn=turn,
        passed=actual == expected and (expects_calls or not called),
        expects_calls=expects_calls,
        expected_state=expected,
        state=actual,
        missing=task.metadata.get("missing", {}).get(turn),
    )


def check_turn(task: Task, state: KVState, turn: int, events: list[ToolEvent]) -> bool:
    """Whether a just-finished turn passed (evaluation stops an episode at its first
    failed turn: success needs every turn)."""
    expected = reference_states(task)[turn]
    return _turn_evidence(task, state, turn, bool(events), expected).passed


def verify(task: Task, state: KVState, episode: Episode) -> Verdict:
    """Success iff every turn passes (`_turn_evidence`); a turn never reached fails."""
    evidence = [
        _turn_evidence(task, state, turn, bool(episode.calls(turn)), expected)
        for turn, expected in enumerate(reference_states(task))
    ]
    success = bool(evidence) and all(item.passed for item in evidence)
    return Verdict(reward=float(success), success=success, turn_evidence=evidence)


def make_env(per_category: int = 64, ood: int = 64) -> LangChainToolEnv:
    """The `kv-calc` environment: `train`, `val` and `test` with `per_category` tasks of
    each of BFCL's four categories (disjoint), and `ood` chains of both operations."""
    seen: set[tuple[str, ...]] = set()
    tasks = {
        split: generate_split(split, per_category, CATEGORIES, seen)
        for split in ("train", "test", "val")
    }
    tasks["ood"] = generate_split("ood", ood, ("ood",), seen)
    return from_langchain_tools(
        "kv-calc",
        tasks={split: tasks[split] for split in ("train", "val", "test", "ood")},
        make_state=lambda task: KVState(task.metadata.get("initial_store")),
        tools=make_tools,
        verify=verify,
        on_turn_end=_snapshot,
        check_turn=check_turn,
        tool_timeout_s=10.0,
    )
