"""The README's example user environment (`examples/notes_env.py`), loaded the way the
CLI loads it: its reference solutions pass its own verifier, a wrong note is diagnosed
(the reference's arguments differ) with both folder states in the evidence, a missing
note is a tool error, and every rollout's folder is removed when the rollout ends."""

from __future__ import annotations

import asyncio
import sys

import pytest
from example_envs import EXAMPLES, load_example, track_sessions

from seal_graph.diagnosis import diagnose_episode
from seal_graph.reference import replay_calls
from seal_graph.registry import get_environment


@pytest.fixture
def env(monkeypatch):
    return load_example(monkeypatch, "notes_env:make_env")


def test_reference_solutions_pass_and_folders_are_cleaned_up(env) -> None:
    assert get_environment("notes") is env
    sessions = track_sessions(env)
    for task in env.tasks("train")[:6]:
        _, verdict = asyncio.run(replay_calls(env, task, task.reference))
        assert verdict.success, task.id
    assert sessions and not any(session.state.folder.exists() for session in sessions)


def test_a_wrong_note_is_diagnosed_and_a_missing_one_is_a_tool_error(env) -> None:
    task = env.tasks("test")[0]
    wrong = [[{"name": "write_note", "args": {"title": "elsewhere", "text": "x"}}], []]
    episode, verdict = asyncio.run(replay_calls(env, task, wrong))
    assert not verdict.success
    first = verdict.turn_evidence[0]
    assert first.state == {"elsewhere": "x"} and first.expected_state != first.state
    labels = [d.label for d in diagnose_episode(episode, task)]
    assert labels[0] == "argument_mismatch"  # write_note, other title than the reference's
    missing = [[{"name": "read_note", "args": {"title": "nothing"}}], []]
    episode, _ = asyncio.run(replay_calls(env, task, missing))
    assert episode.tool_events[0].status == "error"
    assert "no note" in episode.tool_events[0].output


@pytest.mark.slow
@pytest.mark.server
def test_the_readme_train_command_runs_on_the_example(tmp_path, monkeypatch) -> None:
    """The README's `seal-graph train --env notes_env:make_env`, from `examples/`, on a
    small budget: warm start on its references, one iteration, a verified swap, the
    report (minutes on this machine)."""
    import json
    import subprocess

    monkeypatch.chdir(EXAMPLES)
    config = tmp_path / "small.toml"
    config.write_text(
        'preset = "cpu"\niterations = 1\n[warm_start]\nepochs = 1\ntasks_per_category = 4\n'
        "[rollout]\ntasks_per_iteration = 2\n[eval]\nlimit = 4\n"
    )
    out = tmp_path / "run"
    command = [sys.executable, "-m", "seal_graph", "train", "--config", str(config)]
    command += ["--env", "notes_env:make_env", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (iteration,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert iteration["rollout"]["episodes"] == 8 and iteration["swap"]["ok"]
    assert "notes" in (out / "report.md").read_text()
