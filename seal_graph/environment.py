"""What a training environment is: tasks, tools over isolated per-rollout state, a verifier.

An `Environment` hands out `Task`s and opens one `EnvSession` per rollout. A session owns
that rollout's state (fresh backend instances, a fresh key-value store, ...) and the
LangChain tools bound to it, so concurrent rollouts of the same task never share state.
At the end the session's verifier turns the finished episode into a `Verdict`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal

from langchain_core.tools import BaseTool
from pydantic import BaseModel, Field

from seal_graph.errors import ConfigError
from seal_graph.records import Episode, ToolEvent, Verdict
from seal_graph.tool_execution import starts_with_error

ArgumentMatch = Literal["exact", "normalised", "effect"]


class Task(BaseModel):
    """One task: a sequence of user turns, with an optional reference solution."""

    id: str
    turns: list[str] = Field(description="The user message of each turn.")
    system_prompt: str | None = None
    tools_added_at_turn: dict[int, list[str]] = Field(
        default_factory=dict,
        description="Tools held out until a turn (BFCL miss_func); absent before it.",
    )
    reference: list[list[dict[str, Any]]] | None = Field(
        default=None,
        description="Per turn, the reference calls [{'name', 'args'}]; an empty list is a "
        "turn whose right response calls nothing (asks for a missing value, says a tool "
        "is missing).",
    )
    reference_replies: list[str | None] | None = Field(
        default=None,
        description="Per turn, the reference's closing reply to the user: the answer a "
        "question-style turn is verified by, or what an abstaining turn says. A replayed "
        "reference (the warm start's expert episodes) ends each turn with it; None or a "
        "missing entry ends the turn with 'Done.'.",
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="Anything else; `category` groups tasks in evaluation tables.",
    )

    def reply(self, turn: int) -> str:
        """The reference's closing reply of a turn ('Done.' when it has none)."""
        replies = self.reference_replies or []
        reply = replies[turn] if turn < len(replies) else None
        return reply if reply is not None else "Done."


class EnvSession(ABC):
    """One rollout's isolated state and the tools bound to it."""

    @abstractmethod
    def tools(self, turn: int) -> list[BaseTool]:
        """The tools the agent may call during `turn` (held-out tools appear at theirs)."""

    def executable_tools(self, turn: int) -> list[BaseTool]:
        """The tools the agent's calls of `turn` run on: by default what it is offered.
        A benchmark whose official executor runs more (BFCL runs a held-out function
        before it is offered) widens this, so its scores match the official ones."""
        return self.tools(turn)

    def end_turn(self, turn: int, events: list[ToolEvent]) -> None:  # noqa: B027
        """Hook at the end of each user turn (e.g. snapshot state for the verifier)."""

    def turn_passed(self, turn: int, events: list[ToolEvent]) -> bool | None:
        """Whether a just-finished turn passed, if the environment can tell before the
        end (None: it cannot). Evaluation stops an episode at its first failed turn, since
        success needs every turn; `verify` still judges the whole episode."""
        return None

    @abstractmethod
    def verify(self, episode: Episode) -> Verdict:
        """Judge the finished episode by executing, not by reading text."""

    def close(self) -> None:  # noqa: B027
        """Release the session's resources."""


class Environment(ABC):
    """A named source of tasks and sessions."""

    name: str
    tool_timeout_s: float = 30.0
    argument_match: ArgumentMatch = "normalised"
    """How diagnosis compares a call's arguments with the reference's: `exact`,
    `normalised` (numbers compared as numbers: 3 == 3.0) or `effect` (a turn whose calls
    left the reference's state is never an argument mismatch: another SQL text with the
    same result, say)."""
    recovery_hints: dict[str, tuple[str, str]] = {}  # noqa: RUF012 (read-only default)
    """The environment's own error patterns for phi_err: name -> (regex over an error
    text, a hint that never names the fix). Tried before the built-in ones, so e.g. a
    SQL error gets a SQL hint, not the file-path one."""

    @abstractmethod
    def tasks(self, split: str = "train") -> list[Task]:
        """The tasks of a split."""

    @abstractmethod
    def open(self, task: Task) -> EnvSession:
        """A fresh, isolated session for one rollout of `task`."""

    def splits(self) -> list[str]:
        return ["train", "test"]

    def tool_output_is_error(self, output: str) -> bool:
        """Whether a tool's returned text reports a failure (recorded as a tool error, so
        the diagnosis counts it). Default: LangChain's convention, text starting with
        'Error:'; override for tools with another one."""
        return starts_with_error(output)

    def task(self, task_id: str) -> Task:
        """Look a task up by id across the splits."""
        for split in self.splits():
            for task in self.tasks(split):
                if task.id == task_id:
                    return task
        raise ConfigError(f"environment {self.name!r} has no task {task_id!r}")
