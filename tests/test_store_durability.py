"""The trace store survives `kill -9` during writes: a writer process is killed at
random moments again and again; afterwards the database passes SQLite's integrity check
and every stored episode is whole (all its turns, calls and tool events)."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

WRITER = """
import sys
from seal_graph.records import Episode, LLMCall, ToolEvent, TurnRecord
from seal_graph.store import TraceStore

store = TraceStore(sys.argv[1])
store.ensure_run("r", "toy")
print("writing", flush=True)  # imports done (their time varies by machine and load)
start = int(sys.argv[2])
for i in range(start, start + 100_000):
    n = 1 + i % 7
    store.write_episode(Episode(
        episode_id=f"e{i}", run_id="r", env="toy", task_id=f"t{i}", sample_index=0,
        messages=[{"role": "user", "content": "x" * 2000}] * n,
        llm_calls=[LLMCall(turn=k, step=0, prompt_message_count=1, tool_names=[],
                           prompt_token_ids=list(range(300)), completion_token_ids=[1, 2],
                           completion_logprobs=[-0.1, -0.2]) for k in range(n)],
        tool_events=[ToolEvent(turn=k, step=0, call_id=f"c{k}", name="f", arguments={},
                               status="ok", output="y" * 500) for k in range(n)],
        turns=[TurnRecord(index=k, user_message="u") for k in range(n)],
        verdict_details={"n": n},
    ))
"""

KILLS = 12


def _counts(path: Path) -> tuple[str, int, list[tuple[int, int, int, int]]]:
    with sqlite3.connect(path) as conn:
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        rows = conn.execute(
            "SELECT json_extract(verdict_details, '$.n'),"
            " (SELECT COUNT(*) FROM turns t WHERE t.episode_id = e.episode_id),"
            " (SELECT COUNT(*) FROM llm_calls c WHERE c.episode_id = e.episode_id),"
            " (SELECT COUNT(*) FROM tool_events v WHERE v.episode_id = e.episode_id)"
            " FROM episodes e"
        ).fetchall()
        orphans = conn.execute(
            "SELECT COUNT(*) FROM llm_calls"
            " WHERE episode_id NOT IN (SELECT episode_id FROM episodes)"
        ).fetchone()[0]
    return integrity, orphans, rows


def test_store_survives_repeated_kill_9_during_writes(tmp_path, record_reliability) -> None:
    path = tmp_path / "traces.sqlite"
    rng = random.Random(0)
    written = 0
    for round_ in range(KILLS):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(round_ * 10**6)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
        time.sleep(rng.uniform(0.1, 1.5))  # it writes flat out from here
        writer.kill()  # SIGKILL, mid-transaction more often than not
        writer.wait()
        writer.stdout.close()
        integrity, orphans, rows = _counts(path)
        assert integrity == "ok" and orphans == 0
        assert all(n == turns == calls == events for n, turns, calls, events in rows)
        assert len(rows) >= written  # nothing committed is ever lost
        written = len(rows)
    assert written > KILLS  # the writer did get episodes in between kills
    record_reliability(faults_injected=KILLS, episodes_checked=written, episodes_lost=0)
