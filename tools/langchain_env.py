"""Turn existing LangChain tools into a training environment in a few lines.

    env = from_langchain_tools(
        "my-env",
        tasks={"train": train_tasks, "test": test_tasks},
        make_state=lambda task: {"store": {}},          # fresh state per rollout
        tools=lambda state: make_my_tools(state),       # tools bound to that state
        verify=my_verifier,                             # (task, state, episode) -> Verdict
    )

Stateless tools can be passed as a plain list. The tools themselves are used unchanged:
any `BaseTool`, `StructuredTool` or toolkit's `get_tools()`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from langchain_core.tools import BaseTool

from seal_graph.environment import ArgumentMatch, Environment, EnvSession, Task
from seal_graph.errors import ConfigError
from seal_graph.records import Episode, ToolEvent, Verdict

State = TypeVar("State")
Verifier = Callable[[Task, Any, Episode], Verdict]
TurnHook = Callable[[Task, Any, int, list[ToolEvent]], None]
TurnCheck = Callable[[Task, Any, int, list[ToolEvent]], bool]


class LangChainToolSession(EnvSession, Generic[State]):
    """A rollout's state and the tools built over it."""

    def __init__(self, env: LangChainToolEnv, task: Task, state: State) -> None:
        self.env, self.task, self.state = env, task, state
        built = env.build_tools(state)
        held_out = {name for names in task.tools_added_at_turn.values() for name in names}
        self._always = [tool for tool in built if tool.name not in held_out]
        self._held = {tool.name: tool for tool in built if tool.name in held_out}

    def tools(self, turn: int) -> list[BaseTool]:
        added = [
            self._held[name]
            for at, names in self.task.tools_added_at_turn.items()
            if at <= turn
            for name in names
            if name in self._held
        ]
        return self._always + added

    def end_turn(self, turn: int, events: list[ToolEvent]) -> None:
        if self.env.on_turn_end:
            self.env.on_turn_end(self.task, self.state, turn, events)

    def turn_passed(self, turn: int, events: list[ToolEvent]) -> bool | None:
        if self.env.check_turn is None:
            return None
        return self.env.check_turn(self.task, self.state, turn, events)

    def verify(self, episode: Episode) -> Verdict:
        return self.env.verifier(self.task, self.state, episode)

    def close(self) -> None:
        if self.env.on_close:
            self.env.on_close(self.state)


class LangChainToolEnv(Environment):
    """An environment over LangChain tools; see `from_langchain_tools`."""

    def __init__(
        self,
        name: str,
        tasks: dict[str, list[Task]],
        tools: Sequence[BaseTool] | Callable[[Any], Sequence[BaseTool]],
        verify: Verifier,
        make_state: Callable[[Task], Any] | None = None,
        on_turn_end: TurnHook | None = None,
        tool_timeout_s: float = 30.0,
        on_close: Callable[[Any], None] | None = None,
        recovery_hints: dict[str, tuple[str, str]] | None = None,
        argument_match: ArgumentMatch = "normalised",
        check_turn: TurnCheck | None = None,
        is_error: Callable[[str], bool] | None = None,
    ) -> None:
        if not tasks:
            raise ConfigError(f"environment {name!r} needs at least one split of tasks")
        self.name = name
        self._tasks = tasks
        self._tools = tools
        self.verifier = verify
        self.make_state = make_state or (lambda task: None)
        self.on_turn_end = on_turn_end
        self.on_close = on_close
        self.tool_timeout_s = tool_timeout_s
        self.recovery_hints = dict(recovery_hints or {})
        self.argument_match = argument_match
        self.check_turn = check_turn
        self._is_error = is_error

    def tool_output_is_error(self, output: str) -> bool:
        if self._is_error is not None:
            return self._is_error(output)
        return super().tool_output_is_error(output)

    def build_tools(self, state: Any) -> list[BaseTool]:
        tools = list(self._tools(state) if callable(self._tools) else self._tools)
        names = [tool.name for tool in tools]
        if len(set(names)) != len(names):
            raise ConfigError(f"environment {self.name!r} has duplicate tool names: {names}")
        return tools

    def splits(self) -> list[str]:
        return list(self._tasks)

    def tasks(self, split: str = "train") -> list[Task]:
        if split not in self._tasks:
            raise ConfigError(
                f"environment {self.name!r} has no split {split!r}; it has: "
                f"{', '.join(self._tasks)}"
            )
        return self._tasks[split]

    def open(self, task: Task) -> LangChainToolSession:
        return LangChainToolSession(self, task, self.make_state(task))


def from_langchain_tools(
    name: str,
    *,
    tasks: dict[str, list[Task]] | list[Task],
    tools: Sequence[BaseTool] | Callable[[Any], Sequence[BaseTool]],
    verify: Verifier,
    make_state: Callable[[Task], Any] | None = None,
    on_turn_end: TurnHook | None = None,
    tool_timeout_s: float = 30.0,
    on_close: Callable[[Any], None] | None = None,
    recovery_hints: dict[str, tuple[str, str]] | None = None,
    argument_match: ArgumentMatch = "normalised",
    check_turn: TurnCheck | None = None,
    is_error: Callable[[str], bool] | None = None,
) -> LangChainToolEnv:
    """Compose LangChain tools, tasks and a verifier into a training environment.

    `tools` is a list of (stateless) tools, or a function from a rollout's state to the
    tools bound to it; `make_state(task)` builds that state fresh for every rollout, so
    concurrent rollouts never share it. `verify(task, state, episode)` returns a `Verdict`
    whose `turn_evidence` (one `TurnEvidence` per user turn: `pass`, and `state` /
    `expected_state` where the turn changes state) is what the diagnosis labels.
    `on_turn_end(task, state, turn, events)` runs after each user turn (snapshot state
    there); `on_close(state)` when the rollout ends, whatever happened (temporary
    folders, connections). `recovery_hints` (name -> (regex, hint)) are the environment's
    own error patterns for the training interface's recovery hints (phi_err);
    `argument_match` how diagnosis compares a call's arguments with the reference's
    (`exact`, `normalised`, or `effect`: the same resulting state is no mismatch).
    `check_turn(task, state, turn, events) -> bool` (after `on_turn_end`) says whether a
    just-finished turn passed, so evaluation can stop an episode at its first failed turn
    (its success is already decided); without it every episode runs all its turns.
    `is_error(output) -> bool` says whether a tool's returned text reports a failure,
    for toolkits that report errors their own way (langchain-community's
    `RequestsToolkit` returns a 404's body, or `repr(exception)`, as plain text); such a
    call is recorded as a tool error, so diagnosis and recovery hints see it. Default:
    LangChain's convention, text starting with `Error:`.
    """
    split_map = tasks if isinstance(tasks, dict) else {"train": list(tasks)}
    return LangChainToolEnv(
        name,
        split_map,
        tools,
        verify,
        make_state,
        on_turn_end,
        tool_timeout_s,
        on_close,
        recovery_hints,
        argument_match,
        check_turn,
        is_error,
    )
