"""The warm start's rows: each replayed reference solution is one sequence whose loss
mask covers exactly what the agent says (its tool calls and closing answers, each up to
its end-of-turn token) and nothing the tools, the user or the template added."""

from __future__ import annotations

import asyncio
import itertools
import json

from seal_graph.registry import get_environment
from seal_graph.training.settings import WarmStartSettings
from seal_graph.training.sft import expert_dataset, expert_episode, expert_trajectories


def spans(ids: list[int], mask: list[int]) -> list[list[int]]:
    """The runs of masked-in tokens, in order."""
    return [
        [t for t, _ in run]
        for on, run in itertools.groupby(zip(ids, mask, strict=True), key=lambda p: p[1])
        if on
    ]


def test_an_expert_episode_is_one_sequence_masked_to_the_agents_messages(tokenizer) -> None:
    env = get_environment("kv-calc")
    tasks = env.tasks("train")[:3]
    trajectories = asyncio.run(expert_trajectories(env, tasks, tokenizer))
    assert len(trajectories) == 3
    for task, trajectory in zip(tasks, trajectories, strict=True):
        episode = asyncio.run(expert_episode(env, task))
        assistant = [m for m in episode.messages if m["role"] == "assistant"]
        said = [tokenizer.decode(s) for s in spans(trajectory.token_ids, trajectory.agent_mask)]
        assert len(said) == len(assistant) == trajectory.calls  # one span per agent step
        assert trajectory.agent_mask[: trajectory.prompt_length] == [0] * len(trajectory.prompt_ids)
        for message, span in zip(assistant, said, strict=True):
            assert span.endswith(tokenizer.eos_token)  # the turn's end, not the newline after
            assert "<|im_start|>" not in span and "<tool_response>" not in span
            for call in message.get("tool_calls") or []:
                assert call["function"]["name"] in span
                for value in json.loads(call["function"]["arguments"]).values():
                    assert json.dumps(value) in span
            if message.get("content"):
                assert message["content"] in span
        for turn in task.turns:  # the user's words are context
            assert all(turn not in s for s in said)


def test_the_warm_start_dataset_is_pretokenized_for_completion_only_loss(tokenizer) -> None:
    env = get_environment("kv-calc")
    dataset = expert_dataset(env, WarmStartSettings(tasks=2), tokenizer, seed=1)
    assert dataset.column_names == ["input_ids", "completion_mask"]
    for row in dataset:
        assert len(row["input_ids"]) == len(row["completion_mask"]) and 0 < sum(
            row["completion_mask"]
        ) < len(row["input_ids"])
