"""The diagnose → evolve graph and `seal-graph evolve` on a stored batch."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from seal_graph.graphs.diagnose_evolve import graph
from seal_graph.interface import BASE_INTERFACE, GUIDELINES, InterfaceConfig
from seal_graph.reference import replay_calls
from seal_graph.store import TraceStore
from seal_graph.tools.kv_calc import make_env


def stored_batch(path, run_id="batch", tasks=6):
    """Episodes of an agent that never calls a tool: every turn is a missing call."""
    env = make_env()
    store = TraceStore(path)
    store.ensure_run(run_id, env.name)

    async def replay_all():
        return [
            (await replay_calls(env, t, [[] for _ in t.turns], run_id))[0]
            for t in env.tasks("train")[:tasks]
        ]

    with ThreadPoolExecutor(1) as pool:  # callable from inside a running event loop too
        episodes = pool.submit(asyncio.run, replay_all()).result()
    for episode in episodes:
        store.write_episode(episode)
    turns = sum(len(e.turns) for e in store.episodes(run_id))
    store.close()
    return turns


async def test_cycle_labels_the_batch_and_commits_a_new_interface(tmp_path) -> None:
    path = tmp_path / "traces.sqlite"
    turns = stored_batch(path)
    result = await graph.ainvoke({"store_path": str(path), "run_id": "batch"})
    assert result["label_table"] == [
        {"label": "missing_tool_call", "count": turns, "prevalence": 1.0, "mean_reward": 0.0}
    ]
    assert (result["previous_version"], result["version"], result["changed"]) == (0, 1, True)
    assert "guideline for missing_tool_call" in result["summary"]
    store = TraceStore(path)
    labels = store.labels("batch")
    assert sum(len(v) for v in labels.values()) == turns
    interface = store.latest_interface("batch")
    assert interface.version == 1
    assert GUIDELINES["missing_tool_call"] in interface.system_prompt(None)
    # the same batch again (by default the version it ran under, 0) proposes version 1
    # again, which is stored already: kept, not replaced
    again = await graph.ainvoke({"store_path": str(path), "run_id": "batch"})
    assert (again["previous_version"], again["version"]) == (0, 1)
    assert again["interface_written"] is False
    assert TraceStore(path).interfaces("batch") == [interface]
    # version 1 has no batch yet: the error says what to run instead
    with pytest.raises(Exception, match=r"ran under version\(s\) 0: .*--interface-version 0"):
        await graph.ainvoke({"store_path": str(path), "run_id": "batch", "interface_version": 1})


async def test_a_batch_without_episodes_is_a_clear_error(tmp_path) -> None:
    path = tmp_path / "traces.sqlite"
    stored_batch(path, tasks=1)
    with pytest.raises(Exception, match="has no episodes under interface version 3"):
        await graph.ainvoke({"store_path": str(path), "run_id": "batch", "interface_version": 3})


def test_cli_prints_the_label_table_and_the_interface_diff(tmp_path) -> None:
    path = tmp_path / "traces.sqlite"
    stored_batch(path)
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-m", "seal_graph", "evolve", "--run", "batch", "--store", str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "missing_tool_call" in result.stdout and "100%" in result.stdout
    assert "interface v0 -> v1" in result.stdout
    assert "[guideline] missing_tool_call" in result.stdout
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "seal_graph",
            "evolve",
            "--run",
            "x",
            "--store",
            str(tmp_path / "none.sqlite"),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert missing.returncode == 1 and "no trace store at" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_cli_evolve_agrees_with_the_loops_labels_and_never_overwrites_them(
    tmp_path, monkeypatch
) -> None:
    """The loop's diagnose stage (evolution.diagnose with the run's environment) labels a
    batch of a user environment; `seal-graph evolve --env` on the same batch prints the
    same label table and leaves the stored labels, and the interface the loop evolved
    from the batch under the run's id, as they were."""
    from example_envs import EXAMPLES

    from seal_graph import evolution, registry
    from seal_graph.diagnosis import label_statistics

    monkeypatch.chdir(EXAMPLES)
    monkeypatch.setattr(sys, "path", list(sys.path))
    env = registry.get_environment("notes_env:make_env")
    path = tmp_path / "traces.sqlite"
    store = TraceStore(path)
    store.ensure_run("run/it1", env.name)  # a training run's first batch

    async def batch():
        episodes = []
        for task in env.tasks("train")[:4]:
            wrong = [[{**c, "args": {**c["args"], "title": "nope"}} for c in calls]
                     for calls in task.reference]  # fmt: skip
            for sample, calls in enumerate((task.reference, wrong)):
                episode = (await replay_calls(env, task, calls, "run/it1"))[0]
                episodes.append(episode.model_copy(update={"sample_index": sample}))
        return episodes

    episodes = asyncio.run(batch())
    for episode in episodes:
        store.write_episode(episode)
    labelled = asyncio.run(evolution.diagnose(episodes, registry.task_of, None, store, env))
    before = store.labels("run/it1")
    evolved = evolution.propose(BASE_INTERFACE, labelled, InterfaceConfig(), env)
    store.save_interface("run", evolved)  # the loop's evolve stage, under the run's id
    store.close()
    loop_table = {s.label: s.count for s in label_statistics(labelled).values()}
    assert "argument_mismatch" in loop_table  # the references were used

    result = subprocess.run(
        [sys.executable, "-m", "seal_graph", "evolve", "--env", "notes_env:make_env",
         "--run", "run/it1", "--store", str(path)],
        capture_output=True, text=True, check=False, cwd=EXAMPLES,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for label, count in loop_table.items():
        assert any(
            line.split("│")[1].strip() == label and line.split("│")[2].strip() == str(count)
            for line in result.stdout.splitlines()
            if line.count("│") > 3
        ), (label, result.stdout)
    assert "stored labels were kept" in result.stdout
    assert f"already has a version {evolved.version}, which was kept" in result.stdout
    store = TraceStore(path)
    assert store.labels("run/it1") == before
    assert store.interfaces("run") == [evolved] and not store.interfaces("run/it1")
    store.close()
