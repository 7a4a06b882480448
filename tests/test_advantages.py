"""Hand-computed advantages and diagnosis weights (trajectory, turn, dynamic rho), and the
run report's table of them."""

from __future__ import annotations

import pytest

from seal_graph.records import Episode, LabelStat, TurnDiagnosis, TurnRecord
from seal_graph.training.advantages import (
    WeightingConfig,
    group_advantages,
    update_rho,
    weighted_advantages,
)
from seal_graph.training.metrics import DiagnoseMetrics, IterationMetrics, TrainMetrics
from seal_graph.training.report import diagnosis_weight_section

CONFIG = WeightingConfig(dynamic_rho=False)


def episode(eid: str, task: str, reward: float, turns: int = 2, version: int = 0) -> Episode:
    return Episode(
        episode_id=eid,
        run_id="r",
        env="e",
        task_id=task,
        sample_index=0,
        interface_version=version,
        messages=[],
        reward=reward,
        turns=[TurnRecord(index=i, user_message="u") for i in range(turns)],
    )


def labels(*names: str, tags: tuple[str | None, ...] = ()) -> list[TurnDiagnosis]:
    tags = tags or (None,) * len(names)
    pairs = enumerate(zip(names, tags, strict=True))
    return [TurnDiagnosis(turn=i, label=n, tag=t) for i, (n, t) in pairs]


def test_group_relative_advantages_and_zero_signal_groups() -> None:
    batch = [
        episode("a", "t1", 1.0),
        episode("b", "t1", 0.0),
        episode("c", "t1", 0.0),
        episode("d", "t1", 1.0),
        episode("e", "t2", 1.0),
        episode("f", "t2", 1.0),
        episode("g", "t1", 1.0, version=1),
    ]  # another interface version: its own group
    advantage, flat = group_advantages(batch)
    assert advantage["a"] == pytest.approx(1.0, abs=1e-5)  # (1 - 0.5) / 0.5
    assert advantage["b"] == pytest.approx(-1.0, abs=1e-5)
    assert advantage["e"] == advantage["f"] == advantage["g"] == 0.0
    assert flat == 2  # t2 (all 1) and t1 under version 1 (a single episode)


def test_the_progress_reward_gives_a_gradient_where_every_episode_failed() -> None:
    """Beside the paper's binary reward: the share of turns passed (1 on success). Two
    failures that passed different turns form a group with a gradient."""
    batch = [episode("a", "t", 0.0), episode("b", "t", 0.0), episode("c", "t", 1.0)]
    for e, progress in zip(batch, (0.0, 0.5, 1.0), strict=True):
        e.progress = progress
    _, flat = group_advantages(batch[:2])
    assert flat == 1  # the paper's reward: no signal
    advantage, flat = group_advantages(batch[:2], reward="progress")
    assert flat == 0 and advantage["b"] == pytest.approx(1.0, abs=1e-5)
    advantage, _ = group_advantages(batch, reward="progress")
    assert advantage["a"] < advantage["b"] < advantage["c"]


def test_trajectory_weights_follow_eq_10_to_12() -> None:
    pairs = [
        (episode("a", "t", 1.0), labels("pass", "spurious_tool_call")),
        (
            episode("b", "t", 0.0),
            labels(
                "missing_tool_call",
                "state_mismatch",
                tags=("instance_mismatch", "instance_mismatch"),
            ),
        ),
        (episode("c", "t", 0.0), labels("gt_error", "checker_error")),
    ]
    result = weighted_advantages(pairs, CONFIG)
    assert result.weight["a"] == pytest.approx((1.0 + 2.0) / 2)
    assert result.weight["b"] == pytest.approx(0.6)  # BFCL tag wins over the label
    assert result.weight["c"] == 1.0  # no trusted label
    a = result.advantage["a"]
    assert result.for_call("a", 0, "trajectory") == pytest.approx(1.5 * a)
    assert result.for_call("a", 0, "none") == pytest.approx(a)


def test_weights_are_clipped() -> None:
    config = WeightingConfig(dynamic_rho=False, rho={"pass": 5.0, "response_mismatch": 0.1})
    pairs = [
        (episode("a", "t", 1.0), labels("pass", "pass")),
        (episode("b", "t", 0.0), labels("response_mismatch")),
    ]
    result = weighted_advantages(pairs, config)
    assert (result.weight["a"], result.weight["b"]) == (2.0, 0.5)


def test_turn_mode_gives_each_turns_calls_their_own_weight() -> None:
    pairs = [
        (episode("a", "t", 1.0), labels("pass", "spurious_tool_call")),
        (episode("b", "t", 0.0), labels("response_mismatch", "pass")),
    ]
    result = weighted_advantages(pairs, CONFIG)
    a, b = result.advantage["a"], result.advantage["b"]
    assert result.for_call("a", 0, "turn") == pytest.approx(a * 1.0)
    assert result.for_call("a", 1, "turn") == pytest.approx(a * 2.0)
    assert result.for_call("b", 0, "turn") == pytest.approx(b * 0.9)
    assert a > 0 > b  # the sign never changes


def test_moved_advantage_share_per_category() -> None:
    """sum|A~ - A| / sum|A| per category: what the diagnosis weights changed of the
    gradient; a category without signal has no mass and is absent."""
    pairs = [
        (episode("a", "m1", 1.0), labels("pass", "spurious_tool_call")),  # w 1.5, A +1
        (episode("b", "m1", 0.0), labels("response_mismatch", "pass")),  # w 0.95, A -1
        (episode("c", "b1", 1.0), labels("pass")),
        (episode("d", "b1", 1.0), labels("pass")),  # no signal
    ]
    result = weighted_advantages(pairs, CONFIG)
    category = {"m1": "miss_func", "b1": "base"}.__getitem__
    moved = result.moved_share("trajectory", category)
    assert moved == pytest.approx({"all": 0.275, "miss_func": 0.275}, abs=1e-5)
    turn = result.moved_share("turn", category)  # a: mean(0, 1) = 0.5; b: mean(0.1, 0)
    assert turn["miss_func"] == pytest.approx((0.5 + 0.05) / 2, abs=1e-5)
    assert result.moved_share("none", category) == {"all": 0.0, "miss_func": 0.0}


def test_dynamic_rho_moves_by_ema_towards_its_target() -> None:
    config = WeightingConfig()
    stats = {
        "response_mismatch": LabelStat(
            label="response_mismatch", count=64, prevalence=0.25, mean_reward=0.2
        ),
        "spurious_tool_call": LabelStat(
            label="spurious_tool_call", count=16, prevalence=0.5, mean_reward=0.0
        ),
    }
    rho = update_rho(dict(config.rho), stats, config)
    # target = 0.9 * (1 + 0.25 * 0.8 * 1) = 1.08; 0.75 * 0.9 + 0.25 * 1.08 = 0.945
    assert rho["response_mismatch"] == pytest.approx(0.945)
    # target = 2.0 * (1 + 0.5 * 1 * 0.5) = 2.5 -> clamped to 2.0; EMA stays at 2.0
    assert rho["spurious_tool_call"] == pytest.approx(2.0)
    again = update_rho(rho, stats, config)
    assert again["response_mismatch"] == pytest.approx(0.75 * 0.945 + 0.25 * 1.08)
    assert again["pass"] == 1.0  # untouched keys keep their value


def test_report_shows_rho_for_the_tags_the_batches_carried() -> None:
    def iteration(
        i: int, tags: dict[str, int], rho: dict[str, float], moved: float = 0.0
    ) -> IterationMetrics:
        return IterationMetrics(
            iteration=i,  # numbered from 1, as the loop records them
            policy_version=i,
            interface_version=1,
            diagnose=DiagnoseMetrics(tag_counts=tags),
            train=TrainMetrics(
                rho=rho, reweighted_share=moved, moved_advantage={"all": moved / 2} if moved else {}
            ),
        )

    table = {"spurious_tool_call": 2.0, "pass": 1.0}
    history = [
        iteration(1, {"pass": 8, "spurious_tool_call": 2}, {**table, "pass": 1.05}, 0.25),
        iteration(2, {"pass": 9, "state_mismatch": 1}, {**table, "state_mismatch": 1.02}),
    ]
    lines = diagnosis_weight_section(history)
    assert "| it | pass | spurious_tool_call | state_mismatch | abstention tags |" in lines[5]
    assert lines[-2:] == [
        "| 1 | 1.050 | 2.000 | 1.000 | 20% | 25% | 12% |",
        "| 2 | 1.000 | 2.000 | 1.020 | 0% | 0% | — |",
    ]
    unweighted = [iteration(1, {"pass": 1}, {})]  # vanilla GRPO records no rho
    assert diagnosis_weight_section(unweighted) == []


async def test_a_declared_abstention_turn_gets_rho_by_tag_with_fake_model() -> None:
    """The environment says turn 0 needs no call; the agent calls anyway in one episode
    and abstains in the other: the paper's tags, and so its rho (2.0 and 1.8), follow."""
    from fake_models import call, scripted
    from langchain_core.tools import StructuredTool

    from seal_graph.diagnosis import diagnose_episode
    from seal_graph.environment import Task
    from seal_graph.graphs.rollout import RolloutContext, graph
    from seal_graph.records import TurnEvidence, Verdict
    from seal_graph.registry import register_environment
    from seal_graph.tools.langchain_env import from_langchain_tools

    def lookup(name: str) -> str:
        """Look a customer up by name."""
        return f"{name}: id 7"

    def verify(task: Task, state: object, episode: Episode) -> Verdict:
        called = any(e.turn == 0 for e in episode.tool_events)
        turn = TurnEvidence(turn=0, passed=not called, expects_calls=False)
        return Verdict(reward=float(not called), success=not called, turn_evidence=[turn])

    env = from_langchain_tools(
        "asks-first",
        tasks=[Task(id="t", turns=["Look up the customer."])],  # whose? it must ask
        tools=[StructuredTool.from_function(lookup)],
        verify=verify,
    )
    name = register_environment(env)
    pairs = []
    for index, replies in enumerate(
        [(call("lookup", {"name": "Ann"}), "Ann has id 7."), ("Which customer?",)]
    ):
        context = RolloutContext(env=name, chat_model=scripted(*replies))
        result = await graph.ainvoke({"task_id": "t", "episode_id": f"e{index}"}, context=context)
        rolled = Episode.model_validate(result["episode"])
        pairs.append((rolled, diagnose_episode(rolled, env.task("t"))))
    assert [d[0].tag for _, d in pairs] == ["spurious_tool_call", "correct_abstention"]
    weights = weighted_advantages(pairs, CONFIG).weight
    assert weights == {"e0": pytest.approx(2.0), "e1": pytest.approx(1.8)}
