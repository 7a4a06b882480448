"""Episodes as GRPO samples: one served sequence per episode where the calls chain as a
prefix (agent tokens masked in, tool results and user turns out), per-call samples
where they do not."""

from __future__ import annotations

import asyncio

import pytest

from seal_graph.records import Episode, LLMCall, TurnDiagnosis
from seal_graph.training.advantages import weighted_advantages
from seal_graph.training.algorithms import episode_rows
from seal_graph.training.settings import WeightingConfig
from seal_graph.training.trajectories import served_trajectory


def call(turn: int, prompt: list[int], completion: list[int]) -> LLMCall:
    return LLMCall(
        turn=turn,
        step=0,
        prompt_message_count=1,
        tool_names=[],
        prompt_token_ids=prompt,
        completion_token_ids=completion,
        completion_logprobs=[-0.1 * t for t in completion],
    )


def episode(eid: str, reward: float, calls: list[LLMCall]) -> Episode:
    return Episode(
        episode_id=eid,
        run_id="r",
        env="toy",
        task_id="t",
        sample_index=int(eid[-1]),
        messages=[],
        llm_calls=calls,
        reward=reward,
    )


CHAINED = [call(0, [1, 2, 3], [4, 5]), call(1, [1, 2, 3, 4, 5, 6, 7], [8, 9])]
BROKEN = [call(0, [1, 2, 3], [4, 5]), call(1, [1, 2, 3, 4, 50, 6, 7], [8, 9])]


def test_a_chained_episode_is_one_sequence_with_the_agent_tokens_masked_in() -> None:
    sequence = served_trajectory(episode("e0", 1.0, CHAINED))
    assert sequence is not None
    assert sequence.token_ids == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert sequence.agent_mask == [0, 0, 0, 1, 1, 0, 0, 1, 1]
    assert sequence.turns == [-1, -1, -1, 0, 0, -1, -1, 1, 1]
    assert sequence.logprobs[3:5] == pytest.approx([-0.4, -0.5]) and sequence.logprobs[5] == 0
    assert served_trajectory(episode("e1", 0.0, BROKEN)) is None


EOS = 99
RERENDERED = [  # the agent sampled 5; the next prompt re-rendered its message as 50
    call(0, [1, 2, 3], [4, 5, EOS]),
    call(1, [1, 2, 3, 4, 50, EOS, 6, 7], [8, EOS]),
]


def test_a_re_rendered_agent_message_is_kept_as_sampled() -> None:
    sequence = served_trajectory(episode("e2", 1.0, RERENDERED), end_of_turn=EOS)
    assert sequence is not None and sequence.respliced == 1
    assert sequence.token_ids == [1, 2, 3, 4, 5, EOS, 6, 7, 8, EOS]
    assert sequence.agent_mask == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
    assert served_trajectory(episode("e2", 1.0, RERENDERED)) is None  # end token unknown
    cut = [call(0, [1, 2, 3], [4, 5]), call(1, [1, 2, 3, 4, 50, EOS, 6, 7], [8, EOS])]
    assert served_trajectory(episode("e3", 0.0, cut), end_of_turn=EOS) is None  # no turn end


def test_rows_carry_turn_advantages_and_fall_back_to_calls_when_the_prefix_breaks() -> None:
    good, bad = episode("e0", 1.0, CHAINED), episode("e1", 0.0, BROKEN)
    diagnoses = [TurnDiagnosis(turn=0, label="pass"), TurnDiagnosis(turn=1, label="pass")]
    config = WeightingConfig(mode="turn", rho={"pass": 1.0, "state_mismatch": 2.0})
    labelled = [(good, diagnoses), (bad, [TurnDiagnosis(turn=0, label="state_mismatch")] * 1)]
    weighted = weighted_advantages(labelled, config)
    rows, split, respliced = episode_rows([good, bad], weighted, "turn", whole=True)
    assert (
        split == 1 and respliced == 0 and len(rows) == 3
    )  # one sequence, then two calls of the broken one
    whole = rows[0]
    assert whole.prompt_token_ids == [1, 2, 3] and whole.calls == 2
    assert whole.completion_token_ids == [4, 5, 6, 7, 8, 9]
    assert whole.agent_mask == [1, 1, 0, 0, 1, 1]
    a = weighted.advantage["e0"]
    assert whole.token_advantages == pytest.approx([a, a, 0, 0, a, a])
    fallback = rows[1:]
    assert [r.call_index for r in fallback] == [0, 1]
    # the second call's prompt beyond the episode's first prompt is context: masked out,
    # so every sample's prompt is about as long (dense length-grouped micro-batches)
    assert [r.prompt_token_ids for r in fallback] == [[1, 2, 3], [1, 2, 3]]
    assert fallback[1].completion_token_ids == [4, 50, 6, 7, 8, 9]
    assert fallback[1].agent_mask == [0, 0, 0, 0, 1, 1] and not fallback[0].agent_mask
    assert fallback[0].advantage == pytest.approx(2.0 * weighted.advantage["e1"])  # turn 0
    per_call, split, _ = episode_rows([good], weighted, "turn", whole=False)
    assert split == 0 and len(per_call) == 2


@pytest.mark.server
def test_served_episodes_mask_exactly_the_agents_tokens(server, tokenizer, tmp_path) -> None:
    from seal_graph.runners.rollouts import run_rollouts
    from seal_graph.settings import RolloutSettings
    from seal_graph.store import TraceStore

    store = TraceStore(tmp_path / "traces.sqlite")
    task_ids = ["kv_train_0", "kv_train_1", "kv_train_2"]
    settings = RolloutSettings(group_size=2, max_tokens=48, step_limit=3, temperature=1.0)
    asyncio.run(
        run_rollouts("kv-calc", server.endpoint, task_ids, store=store, run_id="seq",
                     settings=settings, show_progress=False)
    )  # fmt: skip
    sequences = 0
    for stored in store.episodes("seq"):
        sequence = served_trajectory(stored)
        if sequence is None:
            continue
        sequences += 1
        agent = [t for t, m in zip(sequence.token_ids, sequence.agent_mask, strict=True) if m]
        served = [t for c in stored.llm_calls for t in c.completion_token_ids]
        assert agent == served  # exactly the sampled tokens, in order
        context = tokenizer.decode(
            [t for t, m in zip(sequence.token_ids, sequence.agent_mask, strict=True) if not m]
        )
        for event in stored.tool_events:  # what the tools answered is context, not action
            if event.status == "ok":
                assert event.output in context
        for turn in stored.turns:
            assert turn.user_message in context
    assert sequences > 0  # measured here: most episodes chain (see the closing note)
