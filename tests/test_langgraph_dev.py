"""`langgraph dev` serves the graphs offline; a real `langgraph_sdk` client uses them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client
from test_diagnose_evolve_graph import stored_batch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dev_server():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGGRAPH_NO_VERSION_CHECK": "true"}
    cli = Path(sys.executable).with_name("langgraph")
    process = subprocess.Popen(
        [
            str(cli),
            "dev",
            "--no-browser",
            "--no-reload",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    else:
        process.kill()
        pytest.fail(process.stdout.read().decode()[-3000:])
    yield url
    process.terminate()
    process.wait(timeout=30)


async def test_graphs_are_listed_with_typed_schemas(dev_server) -> None:
    client = get_client(url=dev_server)
    assistants = {a["graph_id"]: a for a in await client.assistants.search()}
    assert {"rollout", "diagnose_evolve", "train_loop"} <= set(assistants)
    schemas = await client.assistants.get_schemas(assistants["rollout"]["assistant_id"])
    assert "task_id" in schemas["input_schema"]["properties"]
    assert "episode" in schemas["output_schema"]["properties"]
    context = schemas["context_schema"]["properties"]
    assert {"base_url", "api_key", "settings", "store_path"} <= set(context)
    assert "chat_model" not in context and "sessions" not in context  # Python only
    for graph_id in ("rollout", "diagnose_evolve"):
        schemas = await client.assistants.get_schemas(assistants[graph_id]["assistant_id"])
        missing = [
            name
            for name, field in schemas["context_schema"]["properties"].items()
            if not field.get("description")
        ]
        assert missing == [], f"{graph_id}: context fields without a description"
    drawing = await client.assistants.get_graph(assistants["train_loop"]["assistant_id"])
    nodes = {node["id"] for node in drawing["nodes"]}
    assert {"rollout", "diagnose", "evolve", "train", "swap", "evaluate"} <= nodes


async def test_a_rollout_without_credentials_names_the_missing_field(dev_server) -> None:
    client = get_client(url=dev_server)
    thread = await client.threads.create()
    run = await client.runs.create(
        thread["thread_id"],
        "rollout",
        input={"task_id": "kv_train_0"},
        context={"base_url": "", "api_key": ""},
    )
    await client.runs.join(thread["thread_id"], run["run_id"])
    run = await client.runs.get(thread["thread_id"], run["run_id"])
    assert run["status"] == "error"
    state = await client.threads.get(thread["thread_id"])
    assert "base_url" in str(state.get("error") or state), state


@pytest.mark.server
async def test_a_studio_rollout_lands_in_a_store_that_diagnose_evolve_reads(
    dev_server, server, tmp_path
) -> None:
    path = tmp_path / "studio.sqlite"
    client = get_client(url=dev_server)
    output = await client.runs.wait(
        None,
        "rollout",
        input={"task_id": "kv_train_0"},
        context={
            "base_url": server.endpoint.base_url,
            "api_key": server.endpoint.api_key,
            "model": server.endpoint.model,
            "store_path": str(path),
            "run_id": "studio",
            "settings": {"max_tokens": 32, "step_limit": 2},
        },
    )
    assert output["episode"]["run_id"] == "studio"
    evolved = await client.runs.wait(
        None, "diagnose_evolve", input={"store_path": str(path), "run_id": "studio"}
    )
    assert evolved["previous_version"] == 0 and evolved["label_table"]


async def test_diagnose_evolve_runs_on_a_stored_batch_and_draws(dev_server, tmp_path) -> None:
    path = tmp_path / "traces.sqlite"
    turns = stored_batch(path)
    client = get_client(url=dev_server)
    output = await client.runs.wait(
        None, "diagnose_evolve", input={"store_path": str(path), "run_id": "batch"}
    )
    assert output["changed"] is True and output["version"] == 1
    assert output["label_table"][0]["label"] == "missing_tool_call"
    assert output["label_table"][0]["count"] == turns
    assistants = {a["graph_id"]: a for a in await client.assistants.search()}
    drawing = await client.assistants.get_graph(assistants["diagnose_evolve"]["assistant_id"])
    nodes = {node["id"] for node in drawing["nodes"]}
    assert {"load_batch", "diagnose", "aggregate", "propose", "commit"} <= nodes
