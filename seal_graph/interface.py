"""The evolving training interface: what the agent sees during training, never at evaluation.

Observation o becomes o (+) phi_schema (+) phi_err (+) phi_cap; tool semantics and the
verifier never change.

* phi_schema annotates every tool's parameters with `[required]` and `Allowed values: ...`,
  and adds one note: required parameters must be given exactly; no tool outside the schema
  exists.
* phi_err appends a recovery hint to an error the agent sees, chosen by the error's
  pattern (missing required argument, unexpected keyword, no such path, not
  authenticated, unknown tool, type mismatch). A hint never reveals the correct call.
  An environment may add its own patterns and hints (`Environment.recovery_hints`, e.g.
  a SQL error's); they are tried first, and each error counts for the one pattern it
  matches first, so a built-in hint answers only its own kind of error.
* phi_cap injects up to 3 behavioural guidelines into the system prompt, one per
  prevalent failure label (prevalence >= 0.10, mean reward < 0.6, count >= 8; ranked by
  prevalence * (1 - mean reward)).

Each version records which diagnoses caused each adaptation; an adaptation whose label
(or error pattern) stops qualifying is retired in the next version.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from langchain_core.tools import BaseTool
from pydantic import BaseModel, Field

from seal_graph.records import LabelStat

SCHEMA_NOTE = (
    "Give every [required] parameter exactly, with the type the schema states. No tool "
    "exists beyond the ones listed."
)

RecoveryHints = dict[str, tuple[str, str]]
"""Error pattern name -> (regex over the error text, recovery hint that never names the fix)."""

ERROR_HINTS: RecoveryHints = {
    "missing_required_argument": (
        r"required property|Field required|missing \d* ?required|missing a required",
        "Hint: a required parameter is missing; check the tool's [required] parameters.",
    ),
    "unexpected_keyword": (
        r"Additional properties|unexpected keyword|got an unexpected",
        "Hint: the call used a parameter name the tool does not have; use only the "
        "parameter names in its schema.",
    ),
    "no_such_path": (
        r"No such file|no such directory|"
        r"\b(file|path|directory|folder)\b[^\n]*\b(not found|does not exist)",
        "Hint: the target does not exist where you looked; check the current state "
        "(for example list what is there) before acting on it.",
    ),
    "not_authenticated": (
        r"not authenticated|authenticat|log ?in|access token",
        "Hint: the action needs an authenticated session; authenticate first if a tool offers it.",
    ),
    "unknown_tool": (
        r"there is no tool named|No such function|not a valid tool",
        "Hint: that tool does not exist; choose one from the listed tools.",
    ),
    "type_mismatch": (
        r"is not of type|Input should be a valid|must be a JSON object|invalid literal",
        "Hint: an argument has the wrong type; give each value in the type its schema says.",
    ),
}

GUIDELINES: dict[str, str] = {
    "invalid_tool_call": "Call only the listed tools, with exactly their parameter names "
    "and types.",
    "argument_mismatch": "Copy argument values exactly as the user gave them (names, "
    "numbers, paths); do not invent or change them.",
    "state_mismatch": "Keep track of the current state (where you are, what is stored) "
    "before acting; check it with a read-only tool when unsure.",
    "instance_mismatch": "Keep track of the current state before acting; check it with a "
    "read-only tool when unsure.",
    "recovery_failure": "When a tool returns an error, read it, correct the call and try "
    "again before answering.",
    "missing_tool_call": "When the request needs an action, call the tool; do not only "
    "describe what you would do.",
    "empty_turn_model_response": "When the request needs an action, call the tool; do not "
    "only describe what you would do.",
    "response_mismatch": "Retrieve every piece of information the user asked for with the "
    "tools, then report it.",
    "spurious_tool_call": "If a request lacks needed information or no tool fits it, do "
    "not call a tool: say what is missing and ask.",
}


class InterfaceConfig(BaseModel):
    """Switches and thresholds of interface evolution (the paper's values by default)."""

    schema_annotations: bool = Field(default=True, description="phi_schema on.")
    error_hints: bool = Field(default=True, description="phi_err on.")
    guidelines: bool = Field(default=True, description="phi_cap on.")
    min_prevalence: float = Field(
        default=0.10, ge=0, le=1, description="phi_cap: least share of labelled turns."
    )
    max_mean_reward: float = Field(
        default=0.6, ge=0, le=1, description="phi_cap: a label's episodes fare below this."
    )
    min_count: int = Field(default=8, ge=1, description="phi_cap: least occurrences of a label.")
    max_guidelines: int = Field(default=3, ge=0, description="phi_cap: guidelines at most.")
    min_error_count: int = Field(default=3, ge=1, description="Occurrences before a hint.")


class Adaptation(BaseModel):
    """One change to the interface and the diagnoses that caused it."""

    kind: Literal["schema", "error_hint", "guideline"] = Field(
        description="phi_schema (tool parameter notes), phi_err (a recovery hint appended "
        "to matching errors) or phi_cap (a guideline in the system prompt)."
    )
    key: str = Field(description="The label or error pattern it answers.")
    text: str = Field(description="What the agent is shown.")
    pattern: str | None = Field(
        default=None,
        description="phi_err: the regex over error texts the hint answers (the "
        "environment's own or a built-in one).",
    )
    caused_by: dict[str, Any] = Field(
        default_factory=dict,
        description="The label statistics that caused it (count, prevalence, mean reward).",
    )
    since_version: int = Field(description="The interface version that introduced it.")


class InterfaceVersion(BaseModel):
    """A version of the training interface; version 0 is the base interface."""

    version: int = Field(default=0, description="Version number; 0 is the base interface.")
    parent: int | None = Field(default=None, description="The version this one evolved from.")
    adaptations: list[Adaptation] = Field(
        default_factory=list, description="The changes in force in this version."
    )
    retired: list[Adaptation] = Field(
        default_factory=list,
        description="Changes of the parent retired here (their label stopped qualifying).",
    )
    summary: str = Field(default="base interface", description="What changed and why.")

    @property
    def is_base(self) -> bool:
        return not self.adaptations

    def of_kind(self, kind: str) -> list[Adaptation]:
        return [a for a in self.adaptations if a.kind == kind]

    # ---- applying it to what the agent sees -------------------------------------------

    def system_prompt(self, base: str | None) -> str | None:
        """The base system prompt plus the schema note and guidelines of this version."""
        extra = [a.text for a in self.of_kind("schema")]
        guidelines = self.of_kind("guideline")
        if guidelines:
            extra.append("Guidelines:\n" + "\n".join(f"- {g.text}" for g in guidelines))
        if not extra:
            return base
        return "\n\n".join([*([base] if base else []), *extra])

    def tools(self, tools: list[BaseTool]) -> list[BaseTool]:
        """Tools with parameter annotations in their descriptions (phi_schema)."""
        if not self.of_kind("schema"):
            return tools
        return [tool.model_copy(update={"description": annotate(tool)}) for tool in tools]

    def error_text(self, text: str) -> str:
        """An error the agent sees, with the hint for its pattern appended (phi_err)."""
        for hint in self.of_kind("error_hint"):
            pattern = hint.pattern or ERROR_HINTS[hint.key][0]
            if re.search(pattern, text, flags=re.IGNORECASE):
                return f"{text}\n{hint.text}"
        return text


def annotate(tool: BaseTool) -> str:
    """`description` + one line per parameter: `[required]`, type, allowed values."""
    schema = (
        tool.get_input_schema().model_json_schema()
        if not isinstance(tool.args_schema, dict)
        else tool.args_schema
    )
    required = set(schema.get("required", []))
    lines = []
    for name, spec in schema.get("properties", {}).items():
        parts = [name, "[required]" if name in required else "[optional]"]
        if "type" in spec:
            parts.append(f"({spec['type']})")
        if "enum" in spec:
            parts.append("Allowed values: " + ", ".join(map(str, spec["enum"])))
        lines.append(" ".join(parts))
    return tool.description + ("\nParameters: " + "; ".join(lines) if lines else "")


def error_patterns(texts: list[str], hints: RecoveryHints = ERROR_HINTS) -> dict[str, int]:
    """How many error texts match each hint pattern; a text counts for the first pattern
    (in `hints`' order) it matches, so one error never earns two hints."""
    counts = dict.fromkeys(hints, 0)
    for text in texts:
        for key, (pattern, _) in hints.items():
            if re.search(pattern, text, flags=re.IGNORECASE):
                counts[key] += 1
                break
    return counts


def qualifying_labels(stats: dict[str, LabelStat], config: InterfaceConfig) -> list[LabelStat]:
    """The paper's rule: prevalent, low-reward, frequent failure labels, best first."""
    eligible = [
        s
        for s in stats.values()
        if s.label in GUIDELINES
        and s.prevalence >= config.min_prevalence
        and s.mean_reward < config.max_mean_reward
        and s.count >= config.min_count
    ]
    eligible.sort(key=lambda s: s.prevalence * (1 - s.mean_reward), reverse=True)
    return eligible[: config.max_guidelines]


def evolve(
    current: InterfaceVersion,
    stats: dict[str, LabelStat],
    error_texts: list[str],
    config: InterfaceConfig,
    hints: RecoveryHints | None = None,
) -> InterfaceVersion:
    """The next version: add what the batch's diagnoses call for, retire what they no
    longer support. Returns `current` unchanged when nothing changes. `hints` are the
    environment's own error patterns, tried before the built-in ones."""
    own = hints or {}  # first, so each error counts for the environment's pattern first
    table = own | {key: hint for key, hint in ERROR_HINTS.items() if key not in own}
    version = current.version + 1
    wanted: list[Adaptation] = []
    if config.schema_annotations:
        wanted.append(
            next(iter(current.of_kind("schema")), None)
            or Adaptation(
                kind="schema",
                key="schema",
                text=SCHEMA_NOTE,
                since_version=version,
                caused_by={"reason": "configuration (phi_schema on)"},
            )
        )
    if config.error_hints:
        for key, count in error_patterns(error_texts, table).items():
            if count >= config.min_error_count:
                pattern, hint = table[key]
                kept = _keep_or_new(
                    current, "error_hint", key, hint, version, {"occurrences": count}
                )
                wanted.append(kept.model_copy(update={"pattern": pattern}))
    if config.guidelines:
        for stat in qualifying_labels(stats, config):
            wanted.append(
                _keep_or_new(
                    current,
                    "guideline",
                    stat.label,
                    GUIDELINES[stat.label],
                    version,
                    stat.model_dump(),
                )
            )
    wanted_keys = {(a.kind, a.key) for a in wanted}
    retired = [a for a in current.adaptations if (a.kind, a.key) not in wanted_keys]
    if not retired and wanted_keys == {(a.kind, a.key) for a in current.adaptations}:
        return current
    added = [a for a in wanted if a.since_version == version]
    return InterfaceVersion(
        version=version,
        parent=current.version,
        adaptations=wanted,
        retired=retired,
        summary=describe_change(added, retired, stats),
    )


def _keep_or_new(
    current: InterfaceVersion, kind: str, key: str, text: str, version: int, cause: dict[str, Any]
) -> Adaptation:
    for adaptation in current.adaptations:
        if (adaptation.kind, adaptation.key) == (kind, key):
            return adaptation
    return Adaptation(kind=kind, key=key, text=text, since_version=version, caused_by=cause)


def describe_change(
    added: list[Adaptation], retired: list[Adaptation], stats: dict[str, LabelStat]
) -> str:
    """A human-readable account of what changed and why."""
    lines = []
    for a in added:
        why = a.caused_by
        if a.kind == "guideline":
            lines.append(
                f"+ guideline for {a.key}: prevalence {why['prevalence']:.0%}, "
                f"{why['count']} turns, mean reward {why['mean_reward']:.2f} -> "
                f'"{a.text}"'
            )
        elif a.kind == "error_hint":
            lines.append(f"+ error hint for {a.key} ({why['occurrences']} errors matched)")
        else:
            lines.append(f"+ schema annotations ({why.get('reason', '')})")
    for a in retired:
        now = stats.get(a.key)
        state = (
            f"now {now.prevalence:.0%} of turns, mean reward {now.mean_reward:.2f}"
            if now
            else "no longer seen"
        )
        lines.append(f"- retired {a.kind} for {a.key} ({state})")
    return "\n".join(lines) or "no change"


BASE_INTERFACE = InterfaceVersion()
