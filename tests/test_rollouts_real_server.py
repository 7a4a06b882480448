"""A real rollout batch on the bundled model against the real vLLM server."""

from __future__ import annotations

import pytest

from seal_graph import ModelServer, ServerSettings
from seal_graph.runners.rollouts import run_rollouts
from seal_graph.settings import RolloutSettings
from seal_graph.store import TraceStore
from seal_graph.tools.kv_calc import make_env

pytestmark = pytest.mark.server


async def test_batch_writes_complete_episodes_with_decodable_tokens(
    server: ModelServer, served_text, tmp_path
) -> None:
    env = make_env()
    tasks = env.tasks("test")[:3]
    store = TraceStore(tmp_path / "traces.sqlite")
    report = await run_rollouts(
        env,
        server.endpoint,
        [t.id for t in tasks],
        store=store,
        run_id="real",
        settings=RolloutSettings(group_size=2, concurrency=6, max_tokens=64, step_limit=3),
        show_progress=False,
    )
    assert not report.failures and len(report.episodes) == 6
    stored = store.episodes("real")
    assert sorted((e.task_id, e.sample_index) for e in stored) == sorted(
        (t.id, s) for t in tasks for s in range(2)
    )
    by_id = {t.id: t for t in tasks}
    for episode in stored:
        assert len(episode.turns) == len(by_id[episode.task_id].turns)
        assert all(turn.evidence.passed is not None for turn in episode.turns)
        assert episode.llm_calls, episode.episode_id
        for call in episode.llm_calls:
            assert call.prompt_token_ids and call.completion_token_ids
            assert len(call.completion_logprobs) == len(call.completion_token_ids)
            text = served_text(call.completion_token_ids)
            if call.tool_calls:
                assert "<tool_call>" in text
            else:
                assert text == call.completion
    again = await run_rollouts(
        env,
        server.endpoint,
        [t.id for t in tasks],
        store=store,
        run_id="real",
        settings=RolloutSettings(group_size=2),
        show_progress=False,
    )
    assert again.skipped == 6 and store.count("real") == 6


@pytest.fixture(scope="module")
def second_server():
    with ModelServer.start(ServerSettings(port=0, dtype="float32")) as running:
        yield running


async def test_two_endpoints_share_a_batch_with_each_group_on_one_server(
    server: ModelServer, second_server: ModelServer, tmp_path
) -> None:
    env = make_env()
    tasks = [t.id for t in env.tasks("train")[:6]]
    store = TraceStore(tmp_path / "traces.sqlite")
    endpoints = [server.endpoint, second_server.endpoint]
    report = await run_rollouts(
        env,
        endpoints,
        tasks,
        store=store,
        run_id="two",
        settings=RolloutSettings(group_size=2, max_tokens=24, step_limit=2),
        show_progress=False,
    )
    assert not report.failures and len(report.episodes) == 12
    used_by_task: dict[str, set[str]] = {}
    for episode in store.episodes("two"):
        used_by_task.setdefault(episode.task_id, set()).update(
            c.endpoint for c in episode.llm_calls
        )
    assert all(len(urls) == 1 for urls in used_by_task.values())  # a group stays together
    assert set().union(*used_by_task.values()) == {e.base_url for e in endpoints}
