"""Training for several real vLLM servers on loopback: a run that starts two (a core
each) swaps and verifies both every iteration, spreads rollouts over both, and every
stored call names the version that answered it; a replica that refuses a swap leaves
the rotation and no rollout reaches its old weights."""

from __future__ import annotations

import json

import pytest
from loop_envs import yes_no_env

from seal_graph import ModelServer, ServerSettings
from seal_graph.interface import BASE_INTERFACE
from seal_graph.store import TraceStore
from seal_graph.training import loop
from seal_graph.training.config import load_config
from seal_graph.training.resources import open_run
from seal_graph.training.run import run_training

# Four server starts (about four minutes on an AVX2-only CPU): run with `pytest -m slow`.
pytestmark = [pytest.mark.server, pytest.mark.slow]


def _config(**overrides):
    return load_config(
        None,
        "cpu",
        env=yes_no_env(),
        server_dtype="float32",
        rollout={"tasks_per_iteration": 4, "group_size": 2, "max_tokens": 16},
        eval={"every": 2, "limit": 4, "max_tokens": 16, "concurrency": 8},
        optim={"learning_rate": 1e-3},
        warm_start={"epochs": 0},
        **overrides,
    )


def test_two_servers_started_by_the_run_serve_one_verified_version(tmp_path) -> None:
    out = tmp_path / "run"
    run_training(_config(iterations=2, servers=2), out=out)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    swaps = [r["swap"] for r in records if r["swap"].get("version")]
    assert swaps, "no iteration trained new weights"
    for swap in swaps:  # both replicas took every new version, each verified by the probe
        assert swap["ok"] and swap["replicas_ok"] == 2
        assert all(r["mean_logprob_diff"] < 0.0005 for r in swap["replicas"])
    store = TraceStore(out / "traces.sqlite")
    endpoints = set()
    for batch in ("run/it1", "run/it2", "run/eval-it2"):
        for episode in store.episodes(batch):
            for call in episode.llm_calls:  # the weights that answered, as the server said
                expected = "base" if episode.policy_version == "step-0" else episode.policy_version
                assert call.served_version == expected, (batch, call.endpoint)
                endpoints.add(call.endpoint)
    assert len(endpoints) == 2  # tasks spread over both servers
    assert store.episodes("run/it2")[0].policy_version == swaps[0]["version"]


@pytest.fixture(scope="module")
def lora_and_plain():
    """Two servers of one model under one base name: only the first can load adapters,
    so the second refuses a LoRA swap, as a misconfigured replica would."""
    settings = ServerSettings(port=0, dtype="float32", served_model_name="seal-agent-base")
    with (
        ModelServer.start(settings) as lora,
        ModelServer.start(settings.model_copy(update={"enable_lora": False})) as plain,
    ):
        yield lora, plain


def test_a_replica_that_refuses_a_swap_leaves_the_rotation(
    lora_and_plain, tmp_path, capsys
) -> None:
    lora, plain = lora_and_plain
    endpoints = [s.endpoint.model_copy(update={"model": "seal-agent"}) for s in lora_and_plain]
    config = _config(iterations=1, swap="lora")
    run = open_run(tmp_path, "run", config, endpoints, lora.model_dir, server_dtype=lora.dtype)
    try:
        synced = loop.sync_server(run, 0)  # the step-0 adapter under the stable name
        assert synced["ok"] and synced["replicas_ok"] == 1
        refused = next(r for r in synced["replicas"] if not r["ok"])
        assert refused["url"] == plain.endpoint.base_url and refused["left_rotation"]
        assert "left the rotation" in capsys.readouterr().err
        assert run.replicas.agree() == [lora.endpoint.base_url]
        loop.rollout(run, 0, BASE_INTERFACE, served_version=0)
        calls = [c for e in run.store.episodes("run/it1") for c in e.llm_calls]
        assert calls and {c.endpoint for c in calls} == {lora.endpoint.base_url}
        assert {c.served_version for c in calls} == {"step-0"}
    finally:
        run.close()
