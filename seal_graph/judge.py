"""An optional LLM judge for turns no executable evidence can label.

Any OpenAI-compatible endpoint works. The judge answers with structured output that is
validated against the taxonomy; an answer that does not validate leaves the turn
`unverified` — the judge can add labels, never corrupt them.
"""

from __future__ import annotations

import json
from typing import Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field, ValidationError

from seal_graph.labels import DESCRIPTIONS
from seal_graph.records import Episode, TurnDiagnosis

JudgedLabel = Literal[
    "pass",
    "invalid_tool_call",
    "argument_mismatch",
    "state_mismatch",
    "recovery_failure",
    "missing_tool_call",
    "response_mismatch",
    "spurious_tool_call",
]


class Judgement(BaseModel):
    """The judge's label for one turn."""

    label: JudgedLabel = Field(description="One label from the taxonomy.")
    reason: str = Field(description="One sentence of evidence from the transcript.")


def _prompt(episode: Episode, turn: int) -> list:
    events = episode.calls(turn)
    taxonomy = "\n".join(f"- {name}: {DESCRIPTIONS[name]}" for name in JudgedLabel.__args__)
    transcript = {
        "user": episode.turns[turn].user_message,
        "tool_calls": [
            {"name": e.name, "arguments": e.arguments, "status": e.status, "result": e.output[:500]}
            for e in events
        ],
        "final_answer": next(
            (c.completion for c in reversed(episode.llm_calls) if c.turn == turn), ""
        ),
    }
    return [
        SystemMessage(
            "You label one turn of a tool-using agent's episode with exactly "
            f"one failure label.\nLabels:\n{taxonomy}"
        ),
        HumanMessage(json.dumps(transcript, default=str)),
    ]


async def judge_unverified(
    judge: BaseChatModel, episode: Episode, diagnoses: list[TurnDiagnosis]
) -> list[TurnDiagnosis]:
    """Replace `unverified` labels with the judge's validated label, where it gives one."""
    structured = judge.with_structured_output(Judgement, method="json_schema")
    result = []
    for diagnosis in diagnoses:
        if diagnosis.label != "unverified":
            result.append(diagnosis)
            continue
        try:
            verdict = await structured.ainvoke(_prompt(episode, diagnosis.turn))
            judgement = Judgement.model_validate(verdict)
        except (ValidationError, ValueError):
            result.append(diagnosis)
            continue
        result.append(
            diagnosis.model_copy(
                update={
                    "label": judgement.label,
                    "source": "judge",
                    "evidence": {**diagnosis.evidence, "judge_reason": judgement.reason},
                }
            )
        )
    return result
