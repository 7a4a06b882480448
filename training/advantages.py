"""Group-relative advantages, reweighted by the diagnosis (SEAL, Eq. 10-12).

A group is the episodes of one task rolled out under the same interface version and the
same policy version. A_j = (r_j - mean) / (std + eps) within the group; a group whose
rewards are all equal carries no signal (all A_j = 0) and is counted. r_j is the
verifier's binary reward (the paper's), or with `weighting.reward = "progress"` the share
of user turns passed.

Trajectory mode (the paper): with p_j(z) the fraction of trajectory j's labelled turns
that carry label z, w_j = clip(sum_z p_j(z) * rho(z), w_min, w_max) and A~_j = w_j * A_j
(the sign never changes). Turn mode (beyond the paper): the LLM calls of each user turn
get clip(rho(z_turn), w_min, w_max) * A_j, so credit follows the turn that earned it.

A turn's weighting key is the verifier's own per-turn tag when it gives one (BFCL's
checks, which the paper's rho table is written in) and the diagnosis label otherwise;
`checker_error` and `gt_error` turns are left out. Dynamic rho moves each rho(z) towards
rho0(z) * (1 + alpha * prevalence(z) * (1 - mean_reward(z)) * min(1, count(z)/32)),
clamped to [w_min, w_max], with an EMA of rate beta.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable

from pydantic import BaseModel, Field

from seal_graph.labels import UNTRUSTED_LABELS
from seal_graph.records import Episode, LabelStat, TurnDiagnosis
from seal_graph.training.settings import WeightingConfig


def weight_key(diagnosis: TurnDiagnosis) -> str:
    return diagnosis.tag or diagnosis.label


def _clip(value: float, config: WeightingConfig) -> float:
    return min(config.w_max, max(config.w_min, value))


def episode_reward(episode: Episode, reward: str = "success") -> float:
    """The reward advantages are computed from (`WeightingConfig.reward`): the verifier's
    (success), or the share of user turns passed (progress; 1 on success)."""
    return episode.progress if reward == "progress" else episode.reward


def group_advantages(
    episodes: list[Episode], eps: float = 1e-6, reward: str = "success"
) -> tuple[dict[str, float], int]:
    """Group-relative advantage per episode id, and the number of zero-signal groups."""
    groups: dict[tuple[str, int, str], list[Episode]] = defaultdict(list)
    for episode in episodes:
        groups[(episode.task_id, episode.interface_version, episode.policy_version)].append(episode)
    advantages, flat = {}, 0
    for members in groups.values():
        rewards = [episode_reward(e, reward) for e in members]
        mean = statistics.fmean(rewards)
        std = statistics.pstdev(rewards)
        if std == 0.0:
            flat += 1
        for episode, value in zip(members, rewards, strict=True):
            advantages[episode.episode_id] = 0.0 if std == 0.0 else (value - mean) / (std + eps)
    return advantages, flat


def trajectory_weight(
    diagnoses: list[TurnDiagnosis], rho: dict[str, float], config: WeightingConfig
) -> float:
    """w_j = clip(sum_z p_j(z) rho(z)); 1 when no turn carries a trusted label."""
    keys = [weight_key(d) for d in diagnoses if d.label not in UNTRUSTED_LABELS]
    if not keys:
        return 1.0
    return _clip(sum(rho.get(k, 1.0) for k in keys) / len(keys), config)


def turn_weights(
    diagnoses: list[TurnDiagnosis], rho: dict[str, float], config: WeightingConfig
) -> dict[int, float]:
    """Per user turn: clip(rho(z_turn)); untrusted turns weigh 1."""
    return {
        d.turn: 1.0 if d.label in UNTRUSTED_LABELS else _clip(rho.get(weight_key(d), 1.0), config)
        for d in diagnoses
    }


def key_statistics(pairs: list[tuple[Episode, list[TurnDiagnosis]]]) -> dict[str, LabelStat]:
    """Prevalence, count and mean reward per weighting key (tag or label)."""
    counts: dict[str, int] = defaultdict(int)
    rewards: dict[str, list[float]] = defaultdict(list)
    for episode, diagnoses in pairs:
        for d in diagnoses:
            if d.label in UNTRUSTED_LABELS:
                continue
            counts[weight_key(d)] += 1
            rewards[weight_key(d)].append(episode.reward)
    total = sum(counts.values()) or 1
    return {
        k: LabelStat(
            label=k, count=c, prevalence=c / total, mean_reward=statistics.fmean(rewards[k])
        )
        for k, c in counts.items()
    }


def update_rho(
    current: dict[str, float], stats: dict[str, LabelStat], config: WeightingConfig
) -> dict[str, float]:
    """One EMA step of dynamic rho towards its diagnosis-driven target."""
    updated = dict(current)
    for key, stat in stats.items():
        base = config.rho.get(key, 1.0)
        target = base * (
            1
            + config.alpha
            * stat.prevalence
            * (1 - stat.mean_reward)
            * min(1.0, stat.count / config.count_saturation)
        )
        target = _clip(target, config)
        previous = current.get(key, base)
        updated[key] = (1 - config.ema_beta) * previous + config.ema_beta * target
    return updated


class WeightedAdvantages(BaseModel):
    """What the trainer needs per episode and what the report shows."""

    advantage: dict[str, float] = Field(description="Group-relative A_j per episode id.")
    weight: dict[str, float] = Field(description="Trajectory weight w_j per episode id.")
    turn_weight: dict[str, dict[int, float]] = Field(default_factory=dict)
    zero_signal_groups: int = 0
    groups: int = 0
    rho: dict[str, float] = Field(default_factory=dict, description="rho used this batch.")
    task_of: dict[str, str] = Field(default_factory=dict, description="Task id per episode id.")

    def moved_share(self, mode: str, category_of: Callable[[str], str]) -> dict[str, float]:
        """Per category of the episodes' tasks and over all (`all`), the share of the
        batch's advantage mass sum|A_j| that the diagnosis weights moved,
        sum|A~_j - A_j| / sum|A_j| (turn mode: each episode's mean over its user turns):
        how much SEAL's reweighting changed what GRPO learns. A category whose groups
        carry no signal (no mass) is left out."""
        mass: dict[str, float] = defaultdict(float)
        moved: dict[str, float] = defaultdict(float)
        for episode_id, advantage in self.advantage.items():
            if mode == "trajectory":
                change = abs(self.weight[episode_id] - 1.0)
            elif mode == "turn" and self.turn_weight.get(episode_id):
                change = statistics.fmean(
                    abs(w - 1.0) for w in self.turn_weight[episode_id].values()
                )
            else:
                change = 0.0
            for name in (category_of(self.task_of[episode_id]), "all"):
                mass[name] += abs(advantage)
                moved[name] += abs(advantage) * change
        return {name: moved[name] / mass[name] for name in sorted(mass) if mass[name] > 0}

    def for_call(self, episode_id: str, turn: int, mode: str) -> float:
        """The advantage of one LLM call of an episode under the weighting mode."""
        base = self.advantage[episode_id]
        if mode == "turn":
            return base * self.turn_weight.get(episode_id, {}).get(turn, 1.0)
        if mode == "trajectory":
            return base * self.weight[episode_id]
        return base


def weighted_advantages(
    pairs: list[tuple[Episode, list[TurnDiagnosis]]],
    config: WeightingConfig,
    rho: dict[str, float] | None = None,
) -> WeightedAdvantages:
    """Advantages and weights of a batch (rho: the current dynamic rho, if any)."""
    episodes = [e for e, _ in pairs]
    advantage, flat = group_advantages(episodes, config.eps, config.reward)
    rho = dict(rho if rho is not None else config.rho)
    return WeightedAdvantages(
        advantage=advantage,
        weight={e.episode_id: trajectory_weight(d, rho, config) for e, d in pairs},
        turn_weight={e.episode_id: turn_weights(d, rho, config) for e, d in pairs},
        zero_signal_groups=flat,
        groups=len({(e.task_id, e.interface_version, e.policy_version) for e in episodes}),
        rho=rho,
        task_of={e.episode_id: e.task_id for e in episodes},
    )
