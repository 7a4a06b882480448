"""A real rollout batch on the bundled model against the real vLLM server."""

from __future__ import annotations

import pytest

from seal_graph import ModelServer
from seal_graph.rollouts import run_rollouts
from seal_graph.store import TraceStore
from seal_graph.tools.kv_calc import make_env

pytestmark = pytest.mark.server


async def test_batch_writes_complete_episodes_with_decodable_tokens(
    server: ModelServer, tokenizer, tmp_path
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
        samples=2,
        concurrency=6,
        max_tokens=64,
        step_limit=3,
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
        assert all("pass" in turn.evidence for turn in episode.turns)
        assert episode.llm_calls, episode.episode_id
        for call in episode.llm_calls:
            assert call.prompt_token_ids and call.completion_token_ids
            assert len(call.completion_logprobs) == len(call.completion_token_ids)
            text = tokenizer.decode(call.completion_token_ids, skip_special_tokens=True)
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
        samples=2,
        show_progress=False,
    )
    assert again.skipped == 6 and store.count("real") == 6
