"""Turn-level diagnosis: a failure label for every user turn, from executable evidence.

The default diagnoser is deterministic. It reads what the rollout recorded — parse and
schema errors, execution errors, the tools called and their arguments — and the
verifier's turn-by-turn evidence (for BFCL, the official state and response checks
replayed per turn). A failed turn gets the paper's labels in priority order:
invalid_tool_call > argument_mismatch > state_mismatch > recovery_failure >
missing_tool_call > response_mismatch. Environments without per-turn evidence get the
labels the errors support, or `unverified`; an optional LLM judge can label those.

Beside the label, every turn gets the paper's per-turn tag (`paper_tag`): the verifier's
own where it gives one (BFCL's replayed checks), else computed from what the turn
expected (`TurnEvidence.expects_calls`, `expects_reply`) and what the agent did. The
advantage weights (rho) are keyed by these tags, so any environment that says which
turns need calls gets SEAL's weighting.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from seal_graph.environment import ArgumentMatch, Task
from seal_graph.labels import SUCCESS_LABELS, UNTRUSTED_LABELS, Label
from seal_graph.records import Episode, LabelStat, ToolEvent, TurnDiagnosis, TurnEvidence

TaskLookup = Callable[[Episode], Task | None]
"""The task an episode ran (for its reference solution), or None when unknown."""

_INVALID_KINDS = {"parse_error", "unknown_tool", "validation_error"}


def looks_like_error(event: ToolEvent) -> bool:
    """An error event, or a tool that reported an error in its result (BFCL's style)."""
    if event.status == "error":
        return True
    try:
        output = json.loads(event.output)
    except (ValueError, TypeError):
        return False
    return isinstance(output, dict) and "error" in output


def _same_args(left: dict[str, Any], right: dict[str, Any], exact: bool = False) -> bool:
    if exact:
        return left == right

    def norm(value: Any) -> Any:
        return (
            float(value)
            if isinstance(value, int | float) and not isinstance(value, bool)
            else value
        )

    return {k: norm(v) for k, v in left.items()} == {k: norm(v) for k, v in right.items()}


def _argument_mismatch(
    events: list[ToolEvent], reference: list[dict[str, Any]], exact: bool = False
) -> bool:
    """Every reference tool was called, but some reference call's arguments never were."""
    called = [e for e in events if isinstance(e.arguments, dict)]
    names = {e.name for e in called}
    if not reference or not {r["name"] for r in reference} <= names:
        return False
    return any(
        not any(e.name == r["name"] and _same_args(e.arguments, r["args"], exact) for e in called)
        for r in reference
    )


def paper_tag(evidence: TurnEvidence, events: list[ToolEvent]) -> Label | None:
    """The paper's per-turn tag of a turn (METHOD.md), from its evidence:

    * a turn whose right response calls nothing: `spurious_tool_call` if the agent called
      anything, else `correct_abstention` (a state left wrong by an earlier turn is not
      this turn's doing), or `response_mismatch` when the turn's reply was needed
      (`expects_reply`) and the verifier failed it;
    * otherwise `pass` on a passed turn; on a failed one `empty_turn_model_response` when
      calls were needed and none were made, `state_mismatch` when the state differs from
      the reference's, else `response_mismatch`.

    None where the verifier gave no verdict and no expectation (the turn stays untagged).
    """
    if evidence.tag is not None:
        return evidence.tag
    verdict = evidence.verdict()
    if evidence.expects_calls is False:
        if events:
            return "spurious_tool_call"
        wrong_reply = verdict is False and evidence.expects_reply
        return "response_mismatch" if wrong_reply else "correct_abstention"
    if verdict is None:
        return None
    if verdict:
        return "pass"
    if evidence.expects_calls and not events:
        return "empty_turn_model_response"
    if evidence.state_differs():
        return "state_mismatch"
    return "response_mismatch"


def diagnose_turn(
    episode: Episode,
    turn: int,
    reference: list[dict[str, Any]] | None,
    arguments: ArgumentMatch = "normalised",
) -> TurnDiagnosis:
    record = episode.turns[turn]
    evidence = record.evidence
    events = episode.calls(turn)
    tag = paper_tag(evidence, events)
    facts = {
        "events": len(events),
        "errors": sum(looks_like_error(e) for e in events),
        "hit_step_limit": record.hit_step_limit,
    }

    def label(name: str) -> TurnDiagnosis:
        return TurnDiagnosis(turn=turn, label=name, tag=tag, evidence=facts)

    if tag in UNTRUSTED_LABELS or tag == "spurious_tool_call":
        return label(tag)
    passed = evidence.verdict()
    if passed is None and tag == "correct_abstention":
        passed = True  # no call where none was wanted: the abstention is the verdict
    if passed:
        return label(tag if tag in SUCCESS_LABELS else "pass")
    invalid = [e for e in events if e.error_kind in _INVALID_KINDS]
    if invalid:
        return label("invalid_tool_call")
    errored = [e for e in events if looks_like_error(e)]
    if passed is None:  # no verifier evidence: only what errors support
        if errored and looks_like_error(events[-1]):
            return label("recovery_failure")
        return label("unverified")
    same_effect = arguments == "effect" and (
        evidence.expected_state is not None and not evidence.state_differs()
    )
    if (
        reference is not None
        and not same_effect
        and _argument_mismatch(events, reference, exact=arguments == "exact")
    ):
        return label("argument_mismatch")
    executed = any(e.status == "ok" for e in events)
    if executed and (tag == "instance_mismatch" or evidence.state_differs()):
        return label("state_mismatch")
    if errored:
        return label("recovery_failure")
    if not events:
        return label("missing_tool_call")
    return label("response_mismatch")


def diagnose_episode(
    episode: Episode, task: Task | None = None, arguments: ArgumentMatch = "normalised"
) -> list[TurnDiagnosis]:
    """Label every user turn of an episode (`arguments`: how its environment compares a
    call's arguments with the reference's)."""
    references = task.reference if task is not None and task.reference else None
    return [
        diagnose_turn(episode, turn, references[turn] if references else None, arguments)
        for turn in range(len(episode.turns))
    ]


def label_statistics(
    diagnosed: list[tuple[Episode, list[TurnDiagnosis]]],
) -> dict[str, LabelStat]:
    """Prevalence (share of trusted labelled turns), count and mean episode reward per label."""
    counts: Counter[str] = Counter()
    rewards: dict[str, list[float]] = defaultdict(list)
    for episode, diagnoses in diagnosed:
        for diagnosis in diagnoses:
            if diagnosis.label in UNTRUSTED_LABELS:
                continue
            counts[diagnosis.label] += 1
            rewards[diagnosis.label].append(episode.reward)
    total = sum(counts.values()) or 1
    return {
        name: LabelStat(
            label=name,
            count=count,
            prevalence=count / total,
            mean_reward=sum(rewards[name]) / len(rewards[name]),
        )
        for name, count in counts.most_common()
    }


def diagnose_batch(
    episodes: list[Episode],
    task_of: TaskLookup = lambda episode: None,
    arguments: ArgumentMatch = "normalised",
) -> list[tuple[Episode, list[TurnDiagnosis]]]:
    """Label a batch; `task_of` gives each episode's task (its reference solution)."""
    return [
        (episode, diagnose_episode(episode, task_of(episode), arguments)) for episode in episodes
    ]
