"""Preference pairs on hand-made trajectories (ordering, truncation, ties dropped) and
the agent-token mask of a tokenized trajectory."""

from __future__ import annotations

import pytest

from seal_graph.records import Verdict
from seal_graph.training.preferences import (
    EXTRA_STEPS,
    Trajectory,
    failure_pairs,
    target_pairs,
)
from seal_graph.training.trajectories import agent_steps, rendered_trajectory, truncate_steps

PROMPT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Set a to 1."}]


def _steps(n: int, tag: str = "x") -> list[dict]:
    """n agent steps, each a tool call and its result."""
    out = []
    for i in range(n):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        out += [
            {"role": "assistant", "content": f"{tag}{i}", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "ok"},
        ]
    return out


def _traj(task: str, steps: int, score: float, tag: str = "x", source: str = "t") -> Trajectory:
    return Trajectory(task, PROMPT + _steps(steps, tag), score, source)


def test_target_pairs_truncate_the_rejected_to_chosen_length_plus_five() -> None:
    chosen = _traj("a", 2, 1.0, tag="good")
    long_failure = _traj("a", 20, 0.5, tag="bad")
    pairs = target_pairs({"a": chosen}, [long_failure, _traj("b", 3, 0.0)])
    assert len(pairs) == 1  # task b has no chosen trajectory
    pair = pairs[0]
    assert pair.chosen is chosen
    assert agent_steps(pair.rejected.messages) == 2 + EXTRA_STEPS
    assert pair.rejected.messages[-1]["role"] == "tool"  # the last step keeps its result
    assert pair.rejected.score == 0.5


def test_target_pairs_drop_ties_and_identical_continuations() -> None:
    chosen = _traj("a", 2, 1.0, tag="good")
    same_text = Trajectory("a", chosen.messages, 0.0, "t")
    success = _traj("a", 3, 1.0)
    assert target_pairs({"a": chosen}, [same_text, success]) == []


def test_failure_pairs_prefer_higher_progress_and_drop_ties() -> None:
    low, mid, mid2, high = (
        _traj("a", 1, 0.0, "l"),
        _traj("a", 2, 0.5, "m"),
        _traj("a", 3, 0.5, "n"),
        _traj("a", 2, 0.75, "h"),
    )
    success = _traj("a", 2, 1.0, "s")
    pairs = failure_pairs([low, mid, mid2, high, success], per_task=10)
    assert len(pairs) == 5  # C(4, 2) = 6 failure pairs minus the 0.5/0.5 tie; no success
    assert all(p.chosen.score > p.rejected.score for p in pairs)
    assert {(p.chosen.score, p.rejected.score) for p in pairs} == {
        (0.5, 0.0),
        (0.75, 0.0),
        (0.75, 0.5),
    }
    assert len(failure_pairs([low, mid, mid2, high], per_task=2)) == 2


def test_truncate_keeps_everything_when_short() -> None:
    messages = PROMPT + _steps(2)
    assert truncate_steps(messages, 7) == messages


@pytest.mark.parametrize(
    ("verdict", "turns", "expected"),
    [
        (Verdict(reward=1, success=True), 3, 1.0),
        (Verdict(reward=0, success=False, progress=0.4), 3, 0.4),
        (
            Verdict(
                reward=0,
                success=False,
                turn_evidence=[{"pass": True}, {"pass": False}, {"tag": "pass"}, {"pass": 0}],
            ),
            4,
            0.5,
        ),
        (Verdict(reward=0, success=False), 0, 0.0),
    ],
)
def test_partial_progress(verdict: Verdict, turns: int, expected: float) -> None:
    assert verdict.partial_progress(turns) == expected


def test_agent_mask_covers_exactly_the_assistant_messages(tokenizer) -> None:
    messages = PROMPT + _steps(2, tag="act") + [{"role": "user", "content": "Thanks."}]
    messages.append({"role": "assistant", "content": "done"})
    trajectory = rendered_trajectory(tokenizer, messages, [], 2)
    prompt, continuation = trajectory.prompt_ids, trajectory.continuation_ids
    mask = trajectory.continuation_mask
    assert len(continuation) == len(mask)
    masked = tokenizer.decode([t for t, m in zip(continuation, mask, strict=True) if m])
    unmasked = tokenizer.decode([t for t, m in zip(continuation, mask, strict=True) if not m])
    assert "act0" in masked and "act1" in masked and "done" in masked
    assert "Thanks." in unmasked and "ok" in unmasked and "Thanks." not in masked
    assert "Set a to 1." in tokenizer.decode(prompt)
