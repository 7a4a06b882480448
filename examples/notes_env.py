"""A user environment, end to end: LangChain tools over a real per-rollout folder.

    cd examples
    ../.venv/bin/seal-graph eval --env notes_env:make_env --split test --limit 8
    ../.venv/bin/seal-graph train --preset cpu --env notes_env:make_env --out ../runs/notes

Everything seal-graph needs from an environment is here:

* **state per rollout** — `make_state` creates a fresh temporary folder, `on_close`
  deletes it when the rollout ends (whatever happened), so concurrent rollouts never see
  each other's files;
* **tools** — ordinary LangChain tools bound to that folder; `read_note` reports a
  missing note the LangChain way, as text starting with "Error:", which seal-graph
  records as a tool error (the diagnosis counts it);
* **tasks with reference solutions** — a seeded generator with `train` and `test`
  splits; the references let `train` warm-start the model on them;
* **per-turn evidence** — after every user turn `on_turn_end` snapshots the folder, and
  the verifier compares each snapshot with the reference's: a `TurnEvidence` per turn
  with `pass`, `state` and `expected_state`, which is what failure diagnosis reads.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from seal_graph.environment import Task
from seal_graph.records import Episode, ToolEvent, TurnEvidence, Verdict
from seal_graph.tools.langchain_env import LangChainToolEnv, from_langchain_tools

SYSTEM_PROMPT = "You keep short notes in files. Use the tools to do exactly what the user asks."
TITLES = ["groceries", "todo", "ideas", "books", "trip", "gifts"]
WORDS = ["milk", "eggs", "call mum", "tea", "paris", "socks", "bread", "rent"]


class Notes:
    """One rollout's folder and its contents after each user turn."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="seal-notes-"))
        self.after_turn: list[dict[str, str]] = []

    def contents(self) -> dict[str, str]:
        return {p.stem: p.read_text(encoding="utf-8") for p in sorted(self.folder.glob("*.txt"))}


def make_tools(notes: Notes) -> list[BaseTool]:
    def write_note(title: str, text: str) -> str:
        """Create or replace the note `title` with `text`."""
        (notes.folder / f"{title}.txt").write_text(text, encoding="utf-8")
        return f"saved {title}"

    def append_note(title: str, text: str) -> str:
        """Add `text` to the end of the note `title` (one line per addition)."""
        path = notes.folder / f"{title}.txt"
        if not path.exists():
            return f"Error: there is no note called {title!r}"
        path.write_text(path.read_text(encoding="utf-8") + "\n" + text, encoding="utf-8")
        return f"added to {title}"

    def read_note(title: str) -> str:
        """Return the text of the note `title`."""
        path = notes.folder / f"{title}.txt"
        if not path.exists():
            return f"Error: there is no note called {title!r}"
        return path.read_text(encoding="utf-8")

    return [StructuredTool.from_function(f) for f in (write_note, append_note, read_note)]


def _task(rng: random.Random, task_id: str) -> Task:
    """Two turns: write a note, then add to it (or copy it under another title)."""
    first, second = rng.sample(TITLES, 2)
    a, b = rng.sample(WORDS, 2)
    turns = [f"Write a note called '{first}' that says '{a}'."]
    reference: list[list[dict[str, Any]]] = [
        [{"name": "write_note", "args": {"title": first, "text": a}}]
    ]
    if rng.random() < 0.5:
        turns.append(f"Add '{b}' to the note '{first}'.")
        reference.append([{"name": "append_note", "args": {"title": first, "text": b}}])
    else:
        turns.append(f"Copy the note '{first}' into a new note called '{second}'.")
        reference.append(
            [
                {"name": "read_note", "args": {"title": first}},
                {"name": "write_note", "args": {"title": second, "text": a}},
            ]
        )
    return Task(id=task_id, turns=turns, system_prompt=SYSTEM_PROMPT, reference=reference)


def expected_contents(task: Task) -> list[dict[str, str]]:
    """The folder after each turn if the reference solution ran."""
    folder: dict[str, str] = {}
    states = []
    for calls in task.reference or []:
        for call in calls:
            args = call["args"]
            if call["name"] == "write_note":
                folder[args["title"]] = args["text"]
            elif call["name"] == "append_note":
                folder[args["title"]] += "\n" + args["text"]
        states.append(dict(folder))
    return states


def snapshot(task: Task, notes: Notes, turn: int, events: list[ToolEvent]) -> None:
    notes.after_turn.append(notes.contents())


def verify(task: Task, notes: Notes, episode: Episode) -> Verdict:
    evidence = [
        TurnEvidence(turn=turn, passed=seen == wanted, state=seen, expected_state=wanted)
        for turn, (seen, wanted) in enumerate(
            zip(notes.after_turn, expected_contents(task), strict=False)
        )
    ]
    success = len(evidence) == len(task.turns) and all(e.passed for e in evidence)
    return Verdict(reward=float(success), success=success, turn_evidence=evidence)


def make_env() -> LangChainToolEnv:
    """`notes_env:make_env`: 32 training and 16 test tasks, seeded."""
    rng = random.Random(0)
    return from_langchain_tools(
        "notes",
        tasks={
            "train": [_task(rng, f"notes_train_{i}") for i in range(32)],
            "test": [_task(rng, f"notes_test_{i}") for i in range(16)],
        },
        make_state=lambda task: Notes(),
        tools=make_tools,
        verify=verify,
        on_turn_end=snapshot,
        on_close=lambda notes: shutil.rmtree(notes.folder, ignore_errors=True),
    )
