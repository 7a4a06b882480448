"""The optional LLM judge, on the real server: it labels only turns no evidence supports,
and what it returns is validated against the taxonomy."""

from __future__ import annotations

import pytest

from seal_graph import ModelServer
from seal_graph.diagnosis import diagnose_episode
from seal_graph.judge import JudgedLabel, judge_unverified
from seal_graph.records import Episode, LLMCall, TurnRecord

pytestmark = pytest.mark.server


async def test_judge_labels_unverified_turns_with_a_taxonomy_label(server: ModelServer):
    episode = Episode(
        episode_id="e",
        run_id="r",
        env="none",
        task_id="t",
        sample_index=0,
        messages=[
            {"role": "user", "content": "Book a table for two."},
            {"role": "assistant", "content": "Sure, done!"},
        ],
        llm_calls=[
            LLMCall(turn=0, step=0, prompt_message_count=1, tool_names=[], completion="Sure, done!")
        ],
        turns=[
            TurnRecord(index=0, user_message="Book a table for two.", steps=1),
            TurnRecord(index=1, user_message="Thanks.", steps=1, evidence={"pass": True}),
        ],
    )
    rules = diagnose_episode(episode)
    assert [d.label for d in rules] == ["unverified", "pass"]
    judge = server.chat_model(temperature=0.0, max_tokens=96)
    judged = await judge_unverified(judge, episode, rules)
    assert judged[1] == rules[1]  # evidence-backed labels are never touched
    first = judged[0]  # schema-constrained decoding: the answer always validates
    assert first.source == "judge" and first.label in JudgedLabel.__args__
    assert isinstance(first.evidence["judge_reason"], str)
