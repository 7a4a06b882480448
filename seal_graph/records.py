"""The shared record types: what one rollout leaves behind.

Defined once and used by every stage — the rollout graph writes them, the trace store
persists them, diagnosis labels them (`TurnDiagnosis`), training reads their served token
ids (`TrainingSample`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from seal_graph.labels import SUCCESS_LABELS, Label

ToolErrorKind = Literal[
    "parse_error", "unknown_tool", "validation_error", "tool_exception", "timeout"
]


class ToolEvent(BaseModel):
    """One tool call the model made and what came back to it."""

    turn: int = Field(description="User turn (0-based) the call belongs to.")
    step: int = Field(description="Agent step within the turn that produced the call.")
    call_id: str
    name: str
    arguments: dict[str, Any] | str = Field(
        description="Parsed arguments, or the raw text when it was not valid JSON."
    )
    status: Literal["ok", "error"]
    error_kind: ToolErrorKind | None = None
    output: str = Field(description="Exactly what the agent was shown.")
    seconds: float = 0.0


class LLMCall(BaseModel):
    """One completion: the prompt as served, the tokens sampled, their logprobs."""

    turn: int
    step: int
    prompt_message_count: int = Field(
        description="The prompt is the episode's first N messages (stored once per episode)."
    )
    tool_names: list[str] = Field(description="Tools offered to the model on this call.")
    prompt_token_ids: list[int] = Field(default_factory=list)
    completion_token_ids: list[int] = Field(default_factory=list)
    completion_logprobs: list[float] = Field(default_factory=list)
    completion: str = Field(default="", description="Text content of the reply.")
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    finish_reason: str | None = None
    seconds: float = 0.0
    endpoint: str = Field(default="", description="Base URL of the server that answered.")
    served_version: str | None = Field(
        default=None,
        description="The policy version that answered, as the server stamped its answer "
        "(`X-Seal-Policy-Version`); None where the server has no policy card.",
    )


class TurnEvidence(BaseModel):
    """What a verifier saw on one user turn: the record diagnosis reads.

    A verifier gives the turn's verdict as `pass` (True / False) or as a `tag` (one of
    the labels in `seal_graph.labels`, e.g. BFCL's per-turn checks); with `state` and
    `expected_state`, a failed turn whose calls ran is told apart as `state_mismatch`.
    A turn with none of these is `unverified`. Anything else an environment records
    (BFCL: its ground-truth calls) is kept as extra fields.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True, serialize_by_alias=True)

    turn: int | None = Field(default=None, description="User turn (0-based).")
    passed: bool | None = Field(
        default=None, alias="pass", description="The verifier's verdict on the turn."
    )
    tag: Label | None = Field(default=None, description="The verifier's own per-turn label.")
    state: Any = Field(default=None, description="Environment state after the turn.")
    expected_state: Any = Field(
        default=None, description="The state the reference solution leaves after the turn."
    )
    expects_calls: bool | None = Field(
        default=None,
        description="Whether the turn's right response calls tools (False: it asks for a "
        "missing value or says a tool is missing, and calls nothing); None = not said. "
        "With it, the paper's per-turn tags (`correct_abstention`, `spurious_tool_call`, "
        "`empty_turn_model_response`) follow for any environment.",
    )
    expects_reply: bool | None = Field(
        default=None,
        description="Whether the user needs something from the agent's reply (an answer "
        "the turn is verified by); a failed turn with the right state is then a "
        "`response_mismatch`. None = not said.",
    )
    missing: list[str] | None = Field(
        default=None,
        description="On an abstention turn, words that name what is missing (`number`, "
        "`multiply`): a reply naming one says what is missing "
        "(`seal_graph.abstention`). Not part of the verdict.",
    )

    def verdict(self) -> bool | None:
        """True / False, or None when the verifier gave no verdict on this turn."""
        if self.tag is not None:
            return self.tag in SUCCESS_LABELS
        return self.passed

    def state_differs(self) -> bool:
        """The verifier compared states and they differ."""
        return self.expected_state is not None and self.state != self.expected_state


class TurnRecord(BaseModel):
    """One user turn: the request, how many agent steps it took, the verifier's evidence."""

    index: int
    user_message: str
    tools_added: list[str] = Field(default_factory=list)
    steps: int = 0
    hit_step_limit: bool = False
    evidence: TurnEvidence = Field(default_factory=TurnEvidence)


class Verdict(BaseModel):
    """The executable verifier's judgement of a finished episode."""

    reward: float
    success: bool
    turn_evidence: list[TurnEvidence] = Field(
        default_factory=list, description="Per user turn, what the verifier saw."
    )
    details: dict[str, Any] = Field(default_factory=dict)
    progress: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Partial progress in [0, 1] (e.g. state similarity to the reference); "
        "None = the fraction of user turns passed.",
    )

    def partial_progress(self, turns: int) -> float:
        """How close the episode came to success: 1 on success, else the verifier's own
        score, else the fraction of the `turns` user turns it passed. Ranks failures for
        hard-negative mining."""
        if self.success:
            return 1.0
        if self.progress is not None:
            return self.progress
        passed = sum(bool(e.verdict()) for e in self.turn_evidence)
        return passed / turns if turns else 0.0


class Episode(BaseModel):
    """A complete rollout of one task: messages, calls, tool events, turns, verdict."""

    episode_id: str
    run_id: str
    env: str
    task_id: str
    sample_index: int = Field(description="Index within the task's GRPO group.")
    interface_version: int = 0
    policy_version: str = "base"
    messages: list[dict[str, Any]] = Field(description="OpenAI-format conversation.")
    llm_calls: list[LLMCall] = Field(default_factory=list)
    tool_events: list[ToolEvent] = Field(default_factory=list)
    turns: list[TurnRecord] = Field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    verdict_details: dict[str, Any] = Field(default_factory=dict)
    progress: float = Field(default=0.0, description="See `Verdict.partial_progress`.")
    seconds: float = 0.0
    model_seconds: float = Field(default=0.0, description="Time spent waiting on the model.")

    def reply(self, turn: int) -> str:
        """The agent's answer to user turn `turn`: its last assistant text before the
        next user message ('' if it said nothing). What an answer-verified task checks."""
        seen, answer = -1, ""
        for message in self.messages:
            if message.get("role") == "user":
                if seen == turn:
                    break
                seen += 1
            elif message.get("role") == "assistant" and seen == turn:
                content = message.get("content")
                answer = content if isinstance(content, str) and content else answer
        return answer

    def calls(self, turn: int) -> list[ToolEvent]:
        """The agent's tool calls of user turn `turn`, in order."""
        return [event for event in self.tool_events if event.turn == turn]

    def with_verdict(self, verdict: Verdict) -> Episode:
        """This episode judged: reward, success, details, and each turn's evidence."""
        turns = [
            turn.model_copy(update={"evidence": evidence})
            for turn, evidence in zip(self.turns, verdict.turn_evidence, strict=False)
        ]
        turns += self.turns[len(turns) :]
        return self.model_copy(
            update={
                "reward": verdict.reward,
                "success": verdict.success,
                "verdict_details": verdict.details,
                "progress": verdict.partial_progress(len(self.turns)),
                "turns": turns,
            }
        )


class TurnDiagnosis(BaseModel):
    """The label of one user turn and what it rests on."""

    turn: int
    label: Label
    tag: Label | None = Field(default=None, description="The verifier's own per-turn tag.")
    evidence: dict[str, Any] = Field(default_factory=dict)
    source: str = "rules"


class LabelStat(BaseModel):
    """How often a label occurs in a batch and how those episodes fared."""

    label: str
    count: int
    prevalence: float
    mean_reward: float


class TrainingSample(BaseModel):
    """What the GRPO step trains on, token ids and logprobs exactly as served: one LLM
    call (prompt + its completion), or a whole episode as one sequence (the first
    call's prompt + everything after it, with `agent_mask` on the tokens the agent
    sampled and `token_advantages` per token)."""

    episode_id: str = Field(default="", description="Empty for a sample built by hand.")
    task_id: str = ""
    sample_index: int = 0
    interface_version: int = 0
    policy_version: str = "base"
    reward: float = Field(default=0.0, description="The episode's reward.")
    call_index: int = Field(default=0, description="Index among the episode's LLM calls.")
    turn: int = Field(default=0, description="User turn of the call.")
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float] = Field(
        description="Served logprob per completion token (0 where `agent_mask` is 0)."
    )
    advantage: float = Field(default=0.0, description="Diagnosis-weighted advantage.")
    agent_mask: list[int] = Field(
        default_factory=list,
        description="1 on completion tokens the agent sampled (the loss falls there); "
        "empty = all of them (a single call).",
    )
    token_advantages: list[float] = Field(
        default_factory=list,
        description="Advantage per completion token (turn weighting); empty = `advantage`.",
    )
    calls: int = Field(default=1, description="LLM calls the sample covers.")

    @property
    def group(self) -> tuple[str, int, str]:
        """The GRPO group: same task, interface version and policy version."""
        return (self.task_id, self.interface_version, self.policy_version)
