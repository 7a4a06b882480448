"""Evaluation per category, as BFCL tabulates it: greedy and sampled success per category
and overall, each with its interval over tasks."""

from __future__ import annotations

import json

import pytest
from test_cli_errors import run_cli
from test_store import make_episode

from seal_graph import ModelServer
from seal_graph.environment import Task
from seal_graph.runners.evaluation import EvalSummary, render_table, summarize


def test_each_category_gets_its_accuracy_and_interval() -> None:
    tasks = [
        Task(id=f"{c}{i}", turns=["x"], metadata={"category": c}) for c in "ab" for i in range(4)
    ]
    episodes = [make_episode(f"a{i}", 0, float(i < 3)) for i in range(4)] + [
        make_episode(f"b{i}", s, float(s == 0 and i == 0)) for i in range(4) for s in range(2)
    ]
    table, overall = summarize(episodes, tasks)
    assert table["a"]["accuracy"] == 75.0 and table["a"]["tasks"] == 4
    assert table["b"]["accuracy"] == 12.5  # a task's samples averaged first: 0.5 / 4
    low, high = table["a"]["ci"]
    assert 0 <= low <= 75.0 <= high <= 100
    assert overall["accuracy"] == pytest.approx((0.75 * 4 + 0.125 * 4) / 8 * 100)


@pytest.mark.server
def test_eval_prints_greedy_and_sampled_success_per_category(server: ModelServer, tmp_path) -> None:
    result = run_cli(
        "eval",
        "--env",
        "kv-calc",
        "--split",
        "val",
        "--limit",
        "8",
        "--samples",
        "2",
        "--max-tokens",
        "48",
        "--base-url",
        server.endpoint.base_url,
        "--api-key",
        server.endpoint.api_key,
        "--out",
        str(tmp_path),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for column in ("Base", "Miss Param", "Miss Func", "Long Context", "sampled (2 at T=0.7)"):
        assert column in output, output
    summary = EvalSummary.model_validate(
        json.loads((tmp_path / "results.json").read_text())["summary"]
    )
    assert set(summary.per_category) == {"base", "miss_param", "miss_func", "long_context"}
    assert all(len(c["ci"]) == 2 and c["tasks"] == 2 for c in summary.per_category.values())
    assert summary.sampled is not None and set(summary.sampled) == {*summary.per_category, "all"}
    assert render_table(summary).row_count == 3  # greedy, calls / no-calls, sampled
    assert "calls / no-calls" in output
    assert summary.episodes == 8 + 16  # greedy and sampled, as the console counts them
    assert set(summary.abstention) == {*summary.per_category, "all"}
