"""Preference pairs over whole trajectories, for the target agent and the failure agent.

Target (ETO-style): chosen = an expert or successful trajectory of a task, rejected = a
failed trajectory of the same task truncated to the chosen length + 5 agent steps.
Failure agent: over the failures of both agents on one task, the one with the higher
partial progress is chosen — the failure agent learns to fail *close to success*,
which makes its failures hard negatives for the target. Pairs with equal scores, or
whose continuations are identical, carry no preference and are dropped.

All pairs share their prompt: the task's system prompt on the base interface and the
first user turn. What follows (agent steps, tool results, later user turns) is the
continuation being compared.
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from seal_graph.records import Episode
from seal_graph.training.trajectories import agent_steps, truncate_steps

EXTRA_STEPS = 5
"""ETO: a rejected trajectory is cut to the chosen one's agent steps plus this many."""


@dataclass(frozen=True)
class Trajectory:
    """A conversation (system prompt on the base interface, then the first user turn,
    then the continuation) and its partial-progress score (1.0 = success)."""

    task_id: str
    messages: list[dict[str, Any]]
    score: float
    source: str


@dataclass(frozen=True)
class PreferencePair:
    task_id: str
    chosen: Trajectory
    rejected: Trajectory


def from_episode(episode: Episode, system_prompt: str | None, source: str) -> Trajectory:
    """The episode's conversation re-based on the base interface's system prompt (the
    rollout may have run on an evolved one; pairs are learnt on what evaluation sees)."""
    messages = [m for m in episode.messages if m["role"] != "system"]
    if system_prompt:
        messages = [{"role": "system", "content": system_prompt}, *messages]
    return Trajectory(episode.task_id, messages, episode.progress, source)


def prompt_length(trajectory: Trajectory) -> int:
    """Messages in the shared prompt: the optional system message and the first user turn."""
    return 2 if trajectory.messages and trajectory.messages[0]["role"] == "system" else 1


def _continuation(trajectory: Trajectory) -> list[dict[str, Any]]:
    return trajectory.messages[prompt_length(trajectory) :]


def _informative(chosen: Trajectory, rejected: Trajectory) -> bool:
    return chosen.score != rejected.score and _continuation(chosen) != _continuation(rejected)


def target_pairs(
    chosen_by_task: dict[str, Trajectory], negatives: list[Trajectory]
) -> list[PreferencePair]:
    """(expert or success, truncated failure) for every failure of a task with a chosen."""
    pairs = []
    for negative in negatives:
        chosen = chosen_by_task.get(negative.task_id)
        if chosen is None or negative.score >= 1.0:
            continue
        cut = truncate_steps(negative.messages, agent_steps(chosen.messages) + EXTRA_STEPS)
        rejected = Trajectory(negative.task_id, cut, negative.score, negative.source)
        if _informative(chosen, rejected):
            pairs.append(PreferencePair(negative.task_id, chosen, rejected))
    return pairs


def failure_pairs(
    failures: list[Trajectory], per_task: int = 4, seed: int = 0
) -> list[PreferencePair]:
    """Pairs of failures of one task, the higher partial progress chosen; at most
    `per_task` pairs per task (a seeded sample), ties dropped."""
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for failure in failures:
        if failure.score < 1.0:
            by_task[failure.task_id].append(failure)
    rng = random.Random(seed)
    pairs = []
    for task_id in sorted(by_task):
        candidates = [
            PreferencePair(task_id, *sorted((a, b), key=lambda t: t.score, reverse=True))
            for a, b in itertools.combinations(by_task[task_id], 2)
        ]
        candidates = [p for p in candidates if _informative(p.chosen, p.rejected)]
        pairs += rng.sample(candidates, min(per_task, len(candidates)))
    return pairs
