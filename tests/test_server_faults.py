"""Model-server faults on the real CPU server: killed mid-batch it is restarted and the
batch completes with every episode stored exactly once; a server that stays down ends
the batch with a clear error and keeps what was stored."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3

import pytest

from seal_graph import ModelServer, ServerSettings
from seal_graph.errors import ServerError
from seal_graph.registry import get_environment
from seal_graph.runners.rollouts import run_rollouts
from seal_graph.settings import RolloutSettings
from seal_graph.store import TraceStore

# A server start and a restart (over two minutes on an AVX2-only CPU): `pytest -m slow`.
pytestmark = [pytest.mark.server, pytest.mark.slow]

TASKS = [t.id for t in get_environment("kv-calc").tasks("train")[:4]]


@pytest.fixture(scope="module")
def supervised():
    with ModelServer.start(ServerSettings(port=0, dtype="float32")) as server:
        yield server.supervise(poll_s=0.5)


async def _batch_with_fault(server: ModelServer, store: TraceStore, fault) -> object:
    batch = asyncio.create_task(
        run_rollouts(
            "kv-calc",
            server.endpoint,
            TASKS,
            store=store,
            run_id="r",
            settings=RolloutSettings(group_size=2, concurrency=4, max_tokens=48, step_limit=3),
            show_progress=False,
        )
    )
    while store.count("r") < 2 and not batch.done():
        await asyncio.sleep(0.2)
    fault()
    return await batch


def _integrity(store: TraceStore) -> str:
    with sqlite3.connect(store.path) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


def test_killed_server_is_restarted_and_no_episode_is_lost(
    supervised, tmp_path, record_reliability
) -> None:
    store = TraceStore(tmp_path / "traces.sqlite")

    def kill() -> None:
        os.killpg(supervised.process.pid, signal.SIGKILL)

    report = asyncio.run(_batch_with_fault(supervised, store, kill))
    assert supervised.restarts == 1
    assert report.failures == []
    episodes = store.episodes("r")
    assert len(episodes) == len({e.episode_id for e in episodes}) == 8
    assert all(
        len(e.turns) == len(get_environment("kv-calc").task(e.task_id).turns) for e in episodes
    )
    assert _integrity(store) == "ok"
    record_reliability(faults_injected=1, episodes_expected=8, episodes_lost=8 - len(episodes))


def test_a_server_that_stays_down_ends_the_batch_clearly(supervised, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SEAL_GRAPH_RETRY_BUDGET_S", "4")
    store = TraceStore(tmp_path / "traces.sqlite")
    with pytest.raises(ServerError, match=r"stopped answering.*stored episodes.*resume"):
        asyncio.run(_batch_with_fault(supervised, store, supervised.stop))  # no restart
    kept = store.count("r")
    assert kept >= 2 and _integrity(store) == "ok"
    assert all(e.turns for e in store.episodes("r"))  # what was stored is whole
