"""The warm start's rows: each replayed reference solution is one sequence whose loss
mask covers exactly what the agent says (its tool calls and closing answers, each up to
its end-of-turn token) and nothing the tools, the user or the template added."""

from __future__ import annotations

import asyncio
import itertools
import json

from seal_graph.environment import Task
from seal_graph.records import Episode, Verdict
from seal_graph.registry import get_environment
from seal_graph.tools.langchain_env import from_langchain_tools
from seal_graph.training.settings import WarmStartSettings
from seal_graph.training.sft import (
    FAILING_REFERENCE,
    NO_REFERENCE,
    expert_dataset,
    expert_episode,
    expert_trajectories,
)


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
    trajectories = asyncio.run(expert_trajectories(env, tasks, tokenizer)).trajectories
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
    settings = WarmStartSettings(tasks_per_category=1)
    dataset, experts = expert_dataset(env, settings, tokenizer, seed=1)
    assert experts.dropped == {} and experts.tasks == 4
    assert dataset.column_names == ["input_ids", "completion_mask"]
    for row in dataset:
        assert len(row["input_ids"]) == len(row["completion_mask"]) and 0 < sum(
            row["completion_mask"]
        ) < len(row["input_ids"])


def test_a_stratified_reference_set_teaches_every_categorys_abstention_turns(tokenizer) -> None:
    """The same number of tasks from each category, and every abstention turn among
    their sequences counted per category (the warm start trains each once per epoch)."""
    env = get_environment("kv-calc")
    dataset, experts = expert_dataset(env, WarmStartSettings(tasks_per_category=3), tokenizer)
    assert experts.tasks == 12 and len(dataset) == len(experts.sources)
    assert experts.by_category() == {
        "base": {"sequences": 3, "abstention_turns": 0},
        "long_context": {"sequences": 3, "abstention_turns": 0},
        "miss_func": {"sequences": 6, "abstention_turns": 3},  # split where the tool arrives
        "miss_param": {"sequences": 3, "abstention_turns": 3},
    }
    assert "6 abstention turns" in experts.summary()
    again, _ = expert_dataset(env, WarmStartSettings(tasks_per_category=3), tokenizer)
    assert again["input_ids"] == dataset["input_ids"]  # the same draw for the same seed


def test_a_step_counted_warm_start_config_says_what_replaced_it() -> None:
    import pydantic
    import pytest

    with pytest.raises(pydantic.ValidationError, match=r"warm_start\.epochs"):
        WarmStartSettings.model_validate({"steps": 23})


def test_a_held_out_tool_splits_the_expert_episode_where_the_prompt_changes(tokenizer) -> None:
    env = get_environment("kv-calc")
    task = next(t for t in env.tasks("train") if t.tools_added_at_turn)  # miss_func
    experts = asyncio.run(expert_trajectories(env, [task], tokenizer))
    before, after = experts.trajectories  # turns 0-1 without the tool, turn 2 with it
    held_out = task.tools_added_at_turn[2][0]
    prompt_before = tokenizer.decode(before.token_ids[: before.prompt_length])
    assert f'"name": "{held_out}"' not in prompt_before
    said_before = [tokenizer.decode(s) for s in spans(before.token_ids, before.agent_mask)]
    assert any(task.reference_replies[1] in span for span in said_before)  # the abstention
    said_after = [tokenizer.decode(s) for s in spans(after.token_ids, after.agent_mask)]
    assert any(held_out in span for span in said_after)
    assert not any(task.reference_replies[1] in span for span in said_after)  # context now


def answered(task: Task, state: object, episode: Episode) -> Verdict:
    """A question-style task: verified by the agent's last reply, as a SQL answer is."""
    replies = [m["content"] for m in episode.messages if m["role"] == "assistant"]
    success = bool(replies) and "4" in replies[-1]
    return Verdict(reward=float(success), success=success)


def test_answer_verified_references_warm_start_and_the_dropped_are_named(tokenizer) -> None:
    question = ["What is 2 + 2?"]
    env = from_langchain_tools(
        "answers",
        tasks=[
            Task(id="good", turns=question, reference=[[]], reference_replies=["It is 4."]),
            Task(id="wrong", turns=question, reference=[[]], reference_replies=["It is 5."]),
            Task(id="no-reply", turns=question, reference=[[]]),  # ends with "Done."
            Task(id="bare", turns=question),
        ],
        tools=[],
        verify=answered,
    )
    experts = asyncio.run(expert_trajectories(env, env.tasks("train"), tokenizer))
    (taught,) = experts.trajectories
    said = [tokenizer.decode(s) for s in spans(taught.token_ids, taught.agent_mask)]
    assert len(said) == 1 and "It is 4." in said[0]
    assert experts.dropped == {FAILING_REFERENCE: ["wrong", "no-reply"], NO_REFERENCE: ["bare"]}
    assert experts.summary().startswith("1 of 4 references replayed")
    assert "dropped 2: the reference fails" in experts.summary()
