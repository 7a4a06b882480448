"""The trace store: SQLite (WAL), one atomic transaction per finished episode.

Tables: runs, episodes, turns, llm_calls (served token ids and logprobs), tool_events,
labels (written by diagnosis). An episode is either entirely in the store or not at all,
so an interrupted batch resumes by skipping what is there. Readers return `Episode`
records, per-call training samples, JSONL or a Hugging Face `datasets.Dataset`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from seal_graph.errors import ConfigError, StoreError
from seal_graph.interface import BASE_INTERFACE, InterfaceVersion
from seal_graph.records import (
    Episode,
    LLMCall,
    ToolEvent,
    TrainingSample,
    TurnDiagnosis,
    TurnRecord,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, env TEXT NOT NULL, created_at REAL NOT NULL, config TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS episodes (
    episode_id TEXT PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(run_id),
    env TEXT NOT NULL, task_id TEXT NOT NULL, sample_index INTEGER NOT NULL,
    interface_version INTEGER NOT NULL, policy_version TEXT NOT NULL,
    reward REAL NOT NULL, success INTEGER NOT NULL, seconds REAL NOT NULL,
    model_seconds REAL NOT NULL, messages TEXT NOT NULL, verdict_details TEXT NOT NULL,
    created_at REAL NOT NULL, progress REAL NOT NULL DEFAULT 0,
    UNIQUE (run_id, task_id, sample_index, interface_version, policy_version)
);
CREATE TABLE IF NOT EXISTS turns (
    episode_id TEXT NOT NULL REFERENCES episodes(episode_id) ON DELETE CASCADE,
    idx INTEGER NOT NULL, record TEXT NOT NULL, PRIMARY KEY (episode_id, idx)
);
CREATE TABLE IF NOT EXISTS llm_calls (
    episode_id TEXT NOT NULL REFERENCES episodes(episode_id) ON DELETE CASCADE,
    idx INTEGER NOT NULL, turn INTEGER NOT NULL, step INTEGER NOT NULL,
    prompt_token_ids TEXT NOT NULL, completion_token_ids TEXT NOT NULL,
    completion_logprobs TEXT NOT NULL, record TEXT NOT NULL, PRIMARY KEY (episode_id, idx)
);
CREATE TABLE IF NOT EXISTS tool_events (
    episode_id TEXT NOT NULL REFERENCES episodes(episode_id) ON DELETE CASCADE,
    idx INTEGER NOT NULL, turn INTEGER NOT NULL, name TEXT NOT NULL, status TEXT NOT NULL,
    error_kind TEXT, record TEXT NOT NULL, PRIMARY KEY (episode_id, idx)
);
CREATE TABLE IF NOT EXISTS labels (
    episode_id TEXT NOT NULL REFERENCES episodes(episode_id) ON DELETE CASCADE,
    turn INTEGER NOT NULL, label TEXT NOT NULL, source TEXT NOT NULL,
    evidence TEXT NOT NULL, PRIMARY KEY (episode_id, turn, source)
);
CREATE TABLE IF NOT EXISTS interfaces (
    run_id TEXT NOT NULL, version INTEGER NOT NULL, parent INTEGER, created_at REAL NOT NULL,
    data TEXT NOT NULL, PRIMARY KEY (run_id, version)
);
CREATE INDEX IF NOT EXISTS episodes_by_run ON episodes(run_id, task_id);
"""


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


class TraceStore:
    """A SQLite trace store at `path` (created on first use)."""

    def __init__(self, path: str | Path, lock_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        if self.path.is_dir():
            raise ConfigError(f"trace store path {self.path} is a directory; give a file path")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(
                self.path,
                timeout=lock_timeout_s,
                check_same_thread=False,
                isolation_level=None,
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.executescript(SCHEMA)
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"cannot open the trace store {self.path}: {exc}") from exc
        self._lock = threading.Lock()

    def _migrate(self) -> None:
        """Bring a store written by an earlier version up to this schema."""
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(episodes)")}
        if "progress" not in columns:
            self._conn.execute("ALTER TABLE episodes ADD COLUMN progress REAL NOT NULL DEFAULT 0")

    def close(self) -> None:
        self._conn.close()

    def _write(self, statements: list[tuple[str, Any]]) -> None:
        """Run statements in one transaction: all of them land, or none."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                for sql, params in statements:
                    if isinstance(params, list):  # many rows (possibly none)
                        if params:
                            self._conn.executemany(sql, params)
                    else:
                        self._conn.execute(sql, params)
                self._conn.execute("COMMIT")
            except BaseException as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                explained = (
                    self._explain(exc) if isinstance(exc, sqlite3.OperationalError) else None
                )
                if explained is not None:
                    raise explained from exc
                raise

    def _explain(self, exc: sqlite3.OperationalError) -> StoreError | None:
        """A write failure in words: what happened, that nothing half-written remains,
        and what to do."""
        text = str(exc)
        kept = "Episodes committed before this one are intact; nothing of this one was written."
        if "locked" in text or "busy" in text:
            return StoreError(
                f"the trace store {self.path} is locked by another process (waited "
                f"{self.lock_timeout_s:g} s). {kept} Stop the other writer (another run on "
                "the same --out?) and rerun the same command to resume."
            )
        if "full" in text:
            return StoreError(
                f"no space left for the trace store {self.path} ({text}). {kept} Free disk "
                "space (or move the run with --out) and rerun the same command to resume."
            )
        return None  # not one we can explain: the original error goes up as it is

    def ensure_run(self, run_id: str, env: str, config: dict[str, Any] | None = None) -> None:
        self._write(
            [
                (
                    "INSERT OR IGNORE INTO runs VALUES (?, ?, ?, ?)",
                    (run_id, env, time.time(), _dumps(config or {})),
                )
            ]
        )

    def write_episode(self, episode: Episode) -> None:
        """Commit one finished episode atomically (with its turns, calls and events)."""
        e = episode
        self._write(
            [
                (
                    "INSERT INTO episodes VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        e.episode_id,
                        e.run_id,
                        e.env,
                        e.task_id,
                        e.sample_index,
                        e.interface_version,
                        e.policy_version,
                        e.reward,
                        int(e.success),
                        e.seconds,
                        e.model_seconds,
                        _dumps(e.messages),
                        _dumps(e.verdict_details),
                        time.time(),
                        e.progress,
                    ),
                ),
                (
                    "INSERT INTO turns VALUES (?,?,?)",
                    [(e.episode_id, t.index, t.model_dump_json()) for t in e.turns],
                ),
                (
                    "INSERT INTO llm_calls VALUES (?,?,?,?,?,?,?,?)",
                    [
                        (
                            e.episode_id,
                            i,
                            c.turn,
                            c.step,
                            _dumps(c.prompt_token_ids),
                            _dumps(c.completion_token_ids),
                            _dumps(c.completion_logprobs),
                            c.model_dump_json(
                                exclude={
                                    "prompt_token_ids",
                                    "completion_token_ids",
                                    "completion_logprobs",
                                }
                            ),
                        )
                        for i, c in enumerate(e.llm_calls)
                    ],
                ),
                (
                    "INSERT INTO tool_events VALUES (?,?,?,?,?,?,?)",
                    [
                        (
                            e.episode_id,
                            i,
                            t.turn,
                            t.name,
                            t.status,
                            t.error_kind,
                            t.model_dump_json(),
                        )
                        for i, t in enumerate(e.tool_events)
                    ],
                ),
            ]
        )

    def done_keys(self, run_id: str) -> set[tuple[str, int]]:
        """(task_id, sample_index) pairs already stored for a run."""
        rows = self._conn.execute(
            "SELECT task_id, sample_index FROM episodes WHERE run_id = ?", (run_id,)
        )
        return {(task, sample) for task, sample in rows}

    def count(self, run_id: str | None = None) -> int:
        sql, args = ("SELECT COUNT(*) FROM episodes", ())
        if run_id:
            sql, args = sql + " WHERE run_id = ?", (run_id,)
        return self._conn.execute(sql, args).fetchone()[0]

    def rolled_interface_versions(self, run_id: str) -> list[int]:
        """The interface versions a run's stored episodes were rolled out under."""
        rows = self._conn.execute(
            "SELECT DISTINCT interface_version FROM episodes WHERE run_id = ? ORDER BY 1",
            (run_id,),
        )
        return [version for (version,) in rows]

    def runs(self) -> list[str]:
        return [r[0] for r in self._conn.execute("SELECT run_id FROM runs ORDER BY created_at")]

    def iter_episodes(
        self, run_id: str | None = None, interface_version: int | None = None
    ) -> Iterator[Episode]:
        """Episodes in commit order, fully reassembled (optionally of one interface)."""
        where, args = [], []
        if run_id:
            where, args = ["run_id = ?"], [run_id]
        if interface_version is not None:
            where.append("interface_version = ?")
            args.append(interface_version)
        sql = "SELECT * FROM episodes"
        sql += (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY rowid"
        cursor = self._conn.execute(sql, args)
        columns = [d[0] for d in cursor.description]
        for row in cursor.fetchall():
            yield self._assemble(dict(zip(columns, row, strict=True)))

    def episodes(
        self, run_id: str | None = None, interface_version: int | None = None
    ) -> list[Episode]:
        return list(self.iter_episodes(run_id, interface_version))

    # ---- diagnosis labels and interface versions ------------------------------------

    def write_labels(self, episode_id: str, diagnoses: list[TurnDiagnosis]) -> None:
        """Store (or replace, per turn and source) an episode's turn labels, atomically."""
        self._write(
            [
                (
                    "INSERT OR REPLACE INTO labels VALUES (?,?,?,?,?)",
                    [
                        (episode_id, d.turn, d.label, d.source, d.model_dump_json())
                        for d in diagnoses
                    ],
                )
            ]
        )

    def labels(self, run_id: str) -> dict[str, list[TurnDiagnosis]]:
        """Turn labels of a run's episodes, by episode id, in turn order."""
        result: dict[str, list[TurnDiagnosis]] = {}
        for episode_id, data in self._conn.execute(
            "SELECT l.episode_id, l.evidence FROM labels l JOIN episodes e "
            "USING (episode_id) WHERE e.run_id = ? ORDER BY l.episode_id, l.turn",
            (run_id,),
        ):
            result.setdefault(episode_id, []).append(TurnDiagnosis.model_validate_json(data))
        return result

    def save_interface(self, run_id: str, interface: InterfaceVersion) -> None:
        self._write(
            [
                (
                    "INSERT OR REPLACE INTO interfaces VALUES (?,?,?,?,?)",
                    (
                        run_id,
                        interface.version,
                        interface.parent,
                        time.time(),
                        interface.model_dump_json(),
                    ),
                )
            ]
        )

    def interfaces(self, run_id: str) -> list[InterfaceVersion]:
        """Every stored interface version of a run, oldest first."""
        return [
            InterfaceVersion.model_validate_json(row[0])
            for row in self._conn.execute(
                "SELECT data FROM interfaces WHERE run_id = ? ORDER BY version", (run_id,)
            )
        ]

    def interface_lineage(self, batch_id: str) -> str:
        """Whose interface versions a batch evolves: a training run stores its batches as
        `RUN/itN` and its interfaces under `RUN`, so a batch's lineage is the longest
        `/`-prefix of its id that has interfaces, else the batch id itself."""
        parts = batch_id.split("/")
        for end in range(len(parts), 0, -1):
            prefix = "/".join(parts[:end])
            if self._conn.execute(
                "SELECT 1 FROM interfaces WHERE run_id = ? LIMIT 1", (prefix,)
            ).fetchone():
                return prefix
        return batch_id

    def latest_interface(self, run_id: str) -> InterfaceVersion:
        """The newest interface of a run; the base interface when none was committed."""
        versions = self.interfaces(run_id)
        return versions[-1] if versions else BASE_INTERFACE

    def _assemble(self, row: dict[str, Any]) -> Episode:
        eid = row["episode_id"]
        turns = [
            TurnRecord.model_validate_json(r[0])
            for r in self._conn.execute(
                "SELECT record FROM turns WHERE episode_id = ? ORDER BY idx", (eid,)
            )
        ]
        calls = [
            LLMCall.model_validate(
                {
                    **json.loads(rec),
                    "prompt_token_ids": json.loads(p),
                    "completion_token_ids": json.loads(c),
                    "completion_logprobs": json.loads(lp),
                }
            )
            for p, c, lp, rec in self._conn.execute(
                "SELECT prompt_token_ids, completion_token_ids, completion_logprobs, record "
                "FROM llm_calls WHERE episode_id = ? ORDER BY idx",
                (eid,),
            )
        ]
        events = [
            ToolEvent.model_validate_json(r[0])
            for r in self._conn.execute(
                "SELECT record FROM tool_events WHERE episode_id = ? ORDER BY idx", (eid,)
            )
        ]
        return Episode(
            episode_id=eid,
            run_id=row["run_id"],
            env=row["env"],
            task_id=row["task_id"],
            sample_index=row["sample_index"],
            interface_version=row["interface_version"],
            policy_version=row["policy_version"],
            messages=json.loads(row["messages"]),
            llm_calls=calls,
            tool_events=events,
            turns=turns,
            reward=row["reward"],
            success=bool(row["success"]),
            verdict_details=json.loads(row["verdict_details"]),
            progress=row["progress"],
            seconds=row["seconds"],
            model_seconds=row["model_seconds"],
        )

    def training_samples(self, run_id: str) -> list[TrainingSample]:
        """One sample per LLM call, in commit order: served prompt/completion ids and
        logprobs, the episode's reward and its GRPO group key."""
        rows = self._conn.execute(
            "SELECT e.episode_id, e.task_id, e.sample_index, e.interface_version, "
            "e.policy_version, e.reward, c.idx, c.turn, c.prompt_token_ids, "
            "c.completion_token_ids, c.completion_logprobs FROM llm_calls c JOIN episodes e "
            "USING (episode_id) WHERE e.run_id = ? ORDER BY e.rowid, c.idx",
            (run_id,),
        )
        return [
            TrainingSample(
                episode_id=eid,
                task_id=task,
                sample_index=sample,
                interface_version=iv,
                policy_version=pv,
                reward=reward,
                call_index=idx,
                turn=turn,
                prompt_token_ids=json.loads(p),
                completion_token_ids=json.loads(c),
                completion_logprobs=json.loads(lp),
            )
            for eid, task, sample, iv, pv, reward, idx, turn, p, c, lp in rows
        ]

    def export_jsonl(self, path: str | Path, run_id: str | None = None) -> int:
        """Write one episode per line; returns the count."""
        count = 0
        with Path(path).open("w", encoding="utf-8") as handle:
            for episode in self.iter_episodes(run_id):
                handle.write(episode.model_dump_json() + "\n")
                count += 1
        return count

    def to_dataset(self, run_id: str):
        """The run's training samples as a Hugging Face `datasets.Dataset`."""
        from datasets import Dataset

        return Dataset.from_list([s.model_dump() for s in self.training_samples(run_id)])
