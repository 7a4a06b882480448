"""The loop's stages on the bundled model and the real CPU server: a GRPO step changes
the served weights and the server's probe logprobs match the trainer's; a corrupted
adapter is refused and the old weights keep serving. The step runs as a launched job,
so the swap check also proves the loop took the launched step's weights."""

from __future__ import annotations

import shutil

import pytest
from loop_envs import two_turn_env, yes_no_env

from seal_graph import ModelServer, ServerSettings
from seal_graph.interface import BASE_INTERFACE
from seal_graph.labels import UNTRUSTED_LABELS
from seal_graph.training import dpo_loop, loop
from seal_graph.training.advantages import weight_key
from seal_graph.training.config import load_config
from seal_graph.training.resources import open_run
from seal_graph.training.weight_sync import probe_check

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def lora_server():
    """A second server whose base has another name: the stable name is the adapter."""
    with ModelServer.start(
        ServerSettings(port=0, dtype="float32", served_model_name="seal-agent-base")
    ) as s:
        yield s


def test_one_iteration_swaps_verified_weights_and_refuses_a_corrupt_adapter(
    lora_server: ModelServer, tmp_path
) -> None:
    env = yes_no_env()
    config = load_config(
        None,
        "cpu",
        env=env,
        swap="lora",
        iterations=1,
        rollout={"tasks_per_iteration": 4, "group_size": 4, "max_tokens": 16},
        optim={"learning_rate": 1e-3, "micro_batch": 4},
        launcher=[],  # the step runs in a separate process (the `accelerate launch` path);
        # the in-process step is what the resume test's full runs use
    )
    endpoint = lora_server.endpoint.model_copy(update={"model": "seal-agent"})
    run = open_run(
        tmp_path, "loop", config, endpoint, lora_server.model_dir, server_dtype=lora_server.dtype
    )
    try:
        assert loop.sync_server(run, 0)["ok"]  # step-0 adapter under the stable name
        rolled = loop.rollout(run, 0, BASE_INTERFACE, served_version=0)
        assert rolled["episodes"] == 16
        loop.diagnose(run, 0)
        batch = loop.labelled_batch(run, 0)
        result = run.algorithm.train(run, 0, batch, run.algorithm.initial_state())
        trained = result.metrics
        assert trained["stepped"], "the batch had no reward variance: no signal to test with"
        assert trained["zero_signal_groups"] < trained["groups"]
        # the step records the rho it weighted with, for every label the batch carried
        seen = {weight_key(d) for _, ds in batch for d in ds if d.label not in UNTRUSTED_LABELS}
        assert seen <= set(trained["rho"])
        probe = result.probe
        swapped = loop.swap(run, run.policy.version, probe)
        assert run.sync.check == probe_check("float32") and run.sync.check.alternatives
        assert swapped["ok"] and swapped["mean_logprob_diff"] < run.sync.tolerance
        # the served weights really changed, by more than a correct swap's noise: a swap
        # that left the previous weights in place would have been caught
        assert swapped["probe_change"] > run.sync.tolerance
        score = run.policy.completion_logprobs
        stale = run.sync.swap(run.adapter_dir(0), "stale", probe, score)
        assert not stale.ok and stale.rolled_back and "differ" in stale.error

        corrupt = tmp_path / "corrupt"
        shutil.copytree(run.adapter_dir(1), corrupt)
        (corrupt / "adapter_model.safetensors").write_bytes(b"not a tensor file" * 64)
        report = run.sync.swap(corrupt, "corrupt", probe, score)
        assert not report.ok and report.rolled_back and "HTTP" in report.error
        assert run.sync.gap(probe, score)[0] < run.sync.tolerance  # step 1 served again
    finally:
        run.close()
    assert_no_secret(tmp_path, lora_server.endpoint.api_key)


def test_one_coevolve_dpo_iteration_serves_both_agents(lora_server: ModelServer, tmp_path) -> None:
    config = load_config(
        None,
        "cpu",
        env=two_turn_env(),
        algo="coevolve-dpo",
        iterations=1,
        rollout={"tasks_per_iteration": 3, "group_size": 4, "max_tokens": 12, "temperature": 1.0},
        dpo={"learning_rate": 1e-4, "max_pairs": 4, "failure_group_size": 4},
    )
    assert config.swap == "lora"  # both agents are adapters on one server
    endpoint = lora_server.endpoint.model_copy(update={"model": "seal-agent"})
    run = open_run(tmp_path, "co", config, endpoint, lora_server.model_dir)
    algorithm = run.algorithm
    assert isinstance(algorithm, dpo_loop.HardNegativeDPO)
    try:
        assert loop.sync_server(run, 0)["ok"]
        state = algorithm.initial_state()
        algorithm.open(run, state)  # serves the failure agent at step 0
        seeded, updates = algorithm.after_warm_start(run, state)
        assert seeded["failure_agent_seeded"] and updates["failure_served"] == 1
        state.update(updates)
        rolled = loop.rollout(run, 0, BASE_INTERFACE, served_version=0)
        failure = algorithm.rollout(run, 0, BASE_INTERFACE, state)["failure_agent"]
        assert rolled["episodes"] == 12 and failure["episodes"] == 12
        assert 0.0 <= failure["mean_failure_progress"] <= 0.5
        stored = run.store.episodes(dpo_loop.failure_batch_id(run, 0))
        assert {e.progress for e in stored if not e.success} <= {0.0, 0.5}

        result = algorithm.train(run, 0, loop.labelled_batch(run, 0), state)
        trained = result.metrics
        assert trained["negatives"]["count"] == sum(not e.success for e in stored)
        assert "failure_agent" in trained and trained["failure_agent"]["beta"] == 0.1
        # sampled at T=1 the batches differ run to run; measured: 4 failure-agent pairs
        # and 3 target pairs. At least one agent must have had something to learn.
        assert trained["failure_agent"]["pairs"] + trained["target"]["pairs"] > 0
        state.update(result.state)
        if trained["failure_agent"]["pairs"]:
            assert state["failure_version"] == 2  # seeded, then one DPO round
            swapped, updates = algorithm.swap(run, state, result.probe)
            assert swapped["ok"] and updates == {"failure_served": 2}
        if trained["stepped"]:
            assert loop.swap(run, run.policy.version, result.probe)["ok"]

        served = set(lora_server.endpoint.list_models())
        assert {"seal-agent", dpo_loop.FAILURE_NAME} <= served
    finally:
        run.close()
    assert_no_secret(tmp_path, lora_server.endpoint.api_key)


def assert_no_secret(run_dir, key: str) -> None:
    """The API key appears in no file a run writes (traces, metrics, adapters, logs)."""
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert files
    leaked = [p for p in files if key.encode() in p.read_bytes()]
    assert leaked == []


PAPER_TAGS = {
    "pass", "correct_abstention", "spurious_tool_call", "empty_turn_model_response",
    "instance_mismatch", "state_mismatch", "response_mismatch",
}  # fmt: skip


def test_a_planner_stategraph_trains_through_the_loop_with_the_evolved_interface(
    lora_server: ModelServer, tmp_path, tokenizer
) -> None:
    """`examples/own_agents.py`'s planner StateGraph as the rollout, on kv-calc: its
    episodes carry served token ids and the paper's per-turn tags, the evolved interface
    reaches the prompt the graph sent, and the loop's step and verified swap run on them."""
    from seal_graph.interface import Adaptation, InterfaceVersion

    config = load_config(
        None,
        "cpu",
        env="kv-calc",
        agent="examples.own_agents:planner_agent",
        swap="lora",
        iterations=1,
        rollout={"tasks_per_iteration": 2, "group_size": 2, "max_tokens": 32, "step_limit": 2},
        warm_start={"epochs": 0},
    )
    guideline = "If a number you need is missing, ask for it and call nothing."
    interface = InterfaceVersion(
        version=1,
        adaptations=[
            Adaptation(since_version=1, kind="guideline", key="spurious_tool_call", text=guideline),
            Adaptation(since_version=1, kind="schema", key="schema", text="Give [required] ones."),
        ],
    )
    endpoint = lora_server.endpoint.model_copy(update={"model": "seal-agent"})
    run = open_run(
        tmp_path, "own", config, endpoint, lora_server.model_dir, server_dtype=lora_server.dtype
    )
    try:
        assert loop.sync_server(run, 0)["ok"]
        rolled = loop.rollout(run, 0, interface, served_version=0)
        assert rolled["episodes"] == 4 and rolled["abstention"]["all"]["call_turns"] > 0
        episodes = run.store.episodes(loop.batch_run_id(run, 0))
        first = episodes[0].llm_calls[0]
        assert first.completion_token_ids and first.served_version == "step-0"
        prompt = tokenizer.decode(first.prompt_token_ids)
        assert guideline in prompt and "[required]" in prompt  # phi_cap and phi_schema
        loop.diagnose(run, 0)
        batch = loop.labelled_batch(run, 0)
        tags = {d.tag or d.label for _, ds in batch for d in ds}
        assert tags and tags <= PAPER_TAGS | {"invalid_tool_call", "missing_tool_call"}
        result = run.algorithm.train(run, 0, batch, run.algorithm.initial_state())
        if result.metrics["stepped"]:
            assert loop.swap(run, run.policy.version, result.probe)["ok"]
    finally:
        run.close()


def test_seal_graph_train_agent_runs_a_create_agent_graph_to_its_report(
    lora_server: ModelServer, tmp_path
) -> None:
    """The README's `seal-graph train --agent` on `examples/own_agents.py`'s
    `create_agent` graph, attached to a running server: one iteration, the report."""
    import json
    import subprocess
    import sys

    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "seal_graph", "train", "--env", "kv-calc",
        "--agent", "examples.own_agents:react_agent", "--iterations", "1",
        "--base-url", lora_server.endpoint.base_url, "--api-key", lora_server.endpoint.api_key,
        "--out", str(out), "--set", "swap=lora", "--set", "warm_start.epochs=0",
        "--set", "rollout.tasks_per_iteration=2", "--set", "rollout.group_size=2",
        "--set", "rollout.max_tokens=32", "--set", "eval.limit=4", "--set", "eval.baseline=false",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (iteration,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert iteration["rollout"]["episodes"] == 4 and iteration["swap"]["ok"]
    assert "examples.own_agents:react_agent" in (out / "report.md").read_text()


def test_one_step_from_a_stored_run_then_the_verified_swap(
    lora_server: ModelServer, tmp_path
) -> None:
    """Episodes someone already has (here: rolled out against the server beforehand, with
    token ids), trained on by `from_run`: one GRPO step on them, then the verified swap."""
    import asyncio
    import json

    from seal_graph.runners.rollouts import run_rollouts
    from seal_graph.settings import RolloutSettings
    from seal_graph.store import TraceStore
    from seal_graph.training.run import run_training

    env = yes_no_env()
    theirs = TraceStore(tmp_path / "theirs.sqlite")
    settings = RolloutSettings(group_size=4, temperature=1.0, max_tokens=16)
    asyncio.run(
        run_rollouts(
            env, lora_server.endpoint, [f"yn_{i}" for i in range(4)], store=theirs,
            run_id="recorded", settings=settings, show_progress=False,
        )
    )  # fmt: skip
    theirs.close()
    config = load_config(
        None,
        "cpu",
        env=env,
        swap="lora",
        iterations=1,
        from_run={"store": tmp_path / "theirs.sqlite", "run": "recorded"},
        warm_start={"epochs": 0},
        optim={"learning_rate": 1e-3, "micro_batch": 4},
        eval={"limit": 4, "max_tokens": 16, "baseline": False},
    )
    out = tmp_path / "run"
    run_training(
        config,
        out=out,
        base_url=lora_server.endpoint.base_url,
        api_key=lora_server.endpoint.api_key,
    )
    (iteration,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert iteration["rollout"]["episodes"] == 16
    assert iteration["train"]["stepped"], "the recorded batch had no reward variance"
    assert iteration["swap"]["ok"] and iteration["swap"]["version"]
