"""`examples/sql_shop.py`: langchain-community's SQL tools (a toolkit seal-graph did not
write) as an environment, loaded the way the CLI loads it. Its references pass, both in
answer-verified and database-verified tasks; a wrong answer or a wrong change fails; a
SQL error is a recorded tool error that gets the environment's hint, not a file-path
one; every reference reaches the warm start (replies included); databases are removed."""

from __future__ import annotations

import asyncio

import pytest
from example_envs import load_example, track_sessions

from seal_graph.interface import (
    BASE_INTERFACE,
    ERROR_HINTS,
    InterfaceConfig,
    error_patterns,
    evolve,
)
from seal_graph.reference import replay_calls
from seal_graph.training.settings import WarmStartSettings
from seal_graph.training.sft import expert_dataset


@pytest.fixture
def env(monkeypatch):
    return load_example(monkeypatch, "sql_shop:make_env")


def test_references_pass_and_every_database_is_removed(env) -> None:
    sessions = track_sessions(env)
    tasks = env.tasks("train") + env.tasks("test")
    assert {t.metadata["category"] for t in tasks} == {"answer", "database"}
    for task in tasks:
        _, verdict = asyncio.run(replay_calls(env, task, task.reference))
        assert verdict.success, task.id
    assert len(sessions) == len(tasks)
    assert not any(session.state.exists() for session in sessions)


def test_a_wrong_answer_or_a_wrong_change_fails(env) -> None:
    asked = next(t for t in env.tasks("test") if t.metadata["category"] == "answer")
    vague = asked.model_copy(update={"reference_replies": ["I could not find out."]})
    assert not asyncio.run(replay_calls(env, vague, vague.reference))[1].success
    changed = next(t for t in env.tasks("test") if t.metadata["category"] == "database")
    wrong = [[{"name": "sql_db_query", "args": {"query": "DELETE FROM orders"}}]]
    assert not asyncio.run(replay_calls(env, changed, wrong))[1].success


def test_a_sql_error_is_a_tool_error_with_the_environments_hint(env) -> None:
    task = env.tasks("test")[0]
    bad = [[{"name": "sql_db_query", "args": {"query": "SELECT colour FROM products"}}]]
    episode, _ = asyncio.run(replay_calls(env, task, bad))
    (event,) = episode.tool_events
    assert event.status == "error" and "no such column" in event.output
    assert error_patterns([event.output])["no_such_path"] == 0  # not the file-path pattern
    config = InterfaceConfig(min_error_count=1)
    evolved = evolve(BASE_INTERFACE, {}, [event.output], config, env.recovery_hints)
    (hint,) = evolved.of_kind("error_hint")
    assert hint.key == "sql" and hint.text == env.recovery_hints["sql"][1]
    assert hint.text not in {text for _, text in ERROR_HINTS.values()}


def test_every_reference_reaches_the_warm_start_with_its_reply(env, tokenizer) -> None:
    _, experts = expert_dataset(env, WarmStartSettings(epochs=1), tokenizer)
    assert not experts.dropped and len(experts.trajectories) == len(env.tasks("train"))
    answers = [t.metadata["answer"] for t in env.tasks("train") if t.metadata["answer"]]
    texts = [tokenizer.decode(t.token_ids) for t in experts.trajectories]
    assert all(any(f"{answer}<|im_end|>" in text for text in texts) for answer in answers)
