"""The SQLite trace store: atomic episodes, readers, exports."""

from __future__ import annotations

import json
import sqlite3

import pytest

from seal_graph.errors import ConfigError, StoreError
from seal_graph.records import Episode, LLMCall, ToolEvent, TurnRecord
from seal_graph.store import TraceStore


def make_episode(task: str = "t1", sample: int = 0, reward: float = 1.0) -> Episode:
    return Episode(
        episode_id=f"{task}-{sample}",
        run_id="run",
        env="toy",
        task_id=task,
        sample_index=sample,
        messages=[{"role": "user", "content": "hi"}],
        reward=reward,
        success=reward == 1.0,
        llm_calls=[
            LLMCall(
                turn=0,
                step=0,
                prompt_message_count=1,
                tool_names=["add"],
                prompt_token_ids=[1, 2, 3],
                completion_token_ids=[4, 5],
                completion_logprobs=[-0.1, -0.2],
                completion="ok",
            )
        ],
        tool_events=[
            ToolEvent(
                turn=0, step=0, call_id="c", name="add", arguments={"a": 1}, status="ok", output="1"
            )
        ],
        turns=[TurnRecord(index=0, user_message="hi", steps=1, evidence={"pass": True})],
    )


@pytest.fixture
def store(tmp_path):
    store = TraceStore(tmp_path / "traces.sqlite")
    store.ensure_run("run", "toy")
    yield store
    store.close()


def test_round_trip_is_exact(store) -> None:
    episode = make_episode()
    store.write_episode(episode)
    assert store.episodes("run") == [episode]
    assert store.done_keys("run") == {("t1", 0)}
    mode = store._conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_a_failed_write_leaves_nothing_behind(store) -> None:
    store.write_episode(make_episode())
    clash = make_episode(task="t2").model_copy(update={"episode_id": "t1-0"})  # same id
    with pytest.raises(sqlite3.IntegrityError):
        store.write_episode(clash)
    assert store.count() == 1
    rows = store._conn.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0]
    assert rows == 1


def test_training_samples_carry_served_tokens_and_group_keys(store) -> None:
    store.write_episode(make_episode(sample=0, reward=1.0))
    store.write_episode(make_episode(sample=1, reward=0.0))
    samples = store.training_samples("run")
    assert [s.reward for s in samples] == [1.0, 0.0]
    assert samples[0].group == samples[1].group == ("t1", 0, "base")
    assert samples[0].completion_token_ids == [4, 5]
    assert samples[0].completion_logprobs == [-0.1, -0.2]


def test_exports(store, tmp_path) -> None:
    store.write_episode(make_episode())
    assert store.export_jsonl(tmp_path / "out.jsonl") == 1
    line = json.loads((tmp_path / "out.jsonl").read_text())
    assert line["llm_calls"][0]["prompt_token_ids"] == [1, 2, 3]
    dataset = store.to_dataset("run")
    assert dataset.num_rows == 1 and dataset[0]["completion_token_ids"] == [4, 5]


def test_a_directory_is_not_a_store(tmp_path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        TraceStore(tmp_path)


def test_a_corrupt_file_is_a_clear_error(tmp_path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ConfigError, match="cannot open the trace store"):
        TraceStore(bad)


def test_a_locked_store_is_a_clear_error_and_loses_nothing(tmp_path) -> None:
    store = TraceStore(tmp_path / "traces.sqlite", lock_timeout_s=0.2)
    store.ensure_run("run", "toy")
    store.write_episode(make_episode("t1"))
    other = sqlite3.connect(tmp_path / "traces.sqlite", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    with pytest.raises(StoreError, match=r"locked by another process.*rerun the same command"):
        store.write_episode(make_episode("t2"))
    other.execute("ROLLBACK")
    other.close()
    store.write_episode(make_episode("t2"))  # the lock is gone: the same write goes through
    assert store.count("run") == 2


def test_a_full_disk_is_a_clear_error_and_keeps_committed_episodes(tmp_path) -> None:
    store = TraceStore(tmp_path / "traces.sqlite")
    store.ensure_run("run", "toy")
    store.write_episode(make_episode("t1"))
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages + 2}")  # a disk with 8 KiB left
    huge = make_episode("t2").model_copy(
        update={"messages": [{"role": "user", "content": "x" * 200_000}]}
    )
    with pytest.raises(StoreError, match=r"no space left.*intact"):
        store.write_episode(huge)
    assert store.count("run") == 1 and store.episodes("run")[0].task_id == "t1"
    assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
