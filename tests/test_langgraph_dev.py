"""`langgraph dev` serves the graphs offline; a real `langgraph_sdk` client uses them."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import langchain_core.messages as langchain_messages
import pytest
from langgraph_sdk import get_client
from test_diagnose_evolve_graph import stored_batch

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def langgraph_dev(**environment: str) -> Iterator[str]:
    """`langgraph dev` on a free loopback port, offline, with `environment` added; yields
    its URL and stops it (so its on-disk state is written) on the way out."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        **environment,
    }
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
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def dev_server() -> Iterator[str]:
    with langgraph_dev() as url:
        yield url


async def test_graphs_are_listed_with_typed_schemas(dev_server) -> None:
    client = get_client(url=dev_server)
    assistants = {a["graph_id"]: a for a in await client.assistants.search()}
    assert {"rollout", "diagnose_evolve", "train_loop"} <= set(assistants)
    schemas = await client.assistants.get_schemas(assistants["rollout"]["assistant_id"])
    assert "task_id" in schemas["input_schema"]["properties"]
    assert "episode" in schemas["output_schema"]["properties"]
    context = schemas["context_schema"]["properties"]
    assert {"base_url", "api_key_env", "settings", "store_path"} <= set(context)
    assert "api_key" not in context  # a secret's name, never the secret
    assert "chat_model" not in context and "sessions" not in context  # Python only
    drawing = await client.assistants.get_graph(assistants["train_loop"]["assistant_id"])
    nodes = {node["id"] for node in drawing["nodes"]}
    assert {"rollout", "diagnose", "evolve", "train", "swap", "evaluate"} <= nodes


def undescribed(schema: dict) -> list[str]:
    """Fields of a JSON schema, nested types included, that carry no description;
    LangChain's own message types (the `messages` of a rollout) are LangChain's to document."""
    missing: list[str] = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, where)
            return
        if not isinstance(node, dict):
            return
        for name, field in (node.get("properties") or {}).items():
            if not field.get("description"):
                missing.append(f"{where}.{name}")
            walk(field, f"{where}.{name}")
        for key in ("items", "anyOf", "allOf", "additionalProperties"):
            walk(node.get(key), where)

    walk(schema, "")
    for name, definition in (schema.get("$defs") or {}).items():
        if not hasattr(langchain_messages, name):
            walk(definition, name)
    return missing


async def test_every_input_output_and_context_field_is_described(dev_server) -> None:
    client = get_client(url=dev_server)
    for assistant in await client.assistants.search():
        schemas = await client.assistants.get_schemas(assistant["assistant_id"])
        for kind in ("input_schema", "output_schema", "context_schema"):
            assert schemas[kind], (assistant["graph_id"], kind)
            assert undescribed(schemas[kind]) == [], (assistant["graph_id"], kind)


async def test_a_rollout_without_credentials_names_the_missing_field(dev_server) -> None:
    client = get_client(url=dev_server)
    thread = await client.threads.create()
    run = await client.runs.create(
        thread["thread_id"],
        "rollout",
        input={"task_id": "kv_train_0"},
        context={"base_url": ""},
    )
    await client.runs.join(thread["thread_id"], run["run_id"])
    run = await client.runs.get(thread["thread_id"], run["run_id"])
    assert run["status"] == "error"
    state = await client.threads.get(thread["thread_id"])
    assert "base_url" in str(state.get("error") or state), state


@pytest.mark.server
async def test_a_studio_rollout_shows_its_steps_keeps_no_secret_and_feeds_diagnose_evolve(
    server, tmp_path
) -> None:
    key = server.endpoint.api_key
    path = tmp_path / "studio.sqlite"
    context = {
        "base_url": server.endpoint.base_url,
        "model": server.endpoint.model,
        "store_path": str(path),
        "run_id": "studio",
        "settings": {"max_tokens": 32, "step_limit": 2},
    }
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    seen: list[str] = []  # everything the API sent back
    with langgraph_dev(
        SEAL_GRAPH_API_KEY=key, WRONG_KEY="not-the-key", SEAL_GRAPH_RETRY_BUDGET_S="3"
    ) as url:
        client = get_client(url=url)
        thread = await client.threads.create()
        updates: dict[str, list] = {}
        async for part in client.runs.stream(
            thread["thread_id"],
            "rollout",
            input={"task_id": "kv_train_0"},
            context=context,
            stream_mode=["updates", "debug"],
        ):
            seen.append(json.dumps(part.data, default=str))
            if part.event == "updates":
                for node, values in part.data.items():
                    updates.setdefault(node, []).append(values)
        # Studio's node view shows what each step did, not only the verdict
        assert all(values for values in updates["agent"]), updates["agent"]
        assert updates["agent"][0]["llm_calls"] and updates["user_turn"][0]["messages"]
        episode = updates["verify"][0]["episode"]
        assert episode["run_id"] == "studio"
        evolved = await client.runs.wait(
            None, "diagnose_evolve", input={"store_path": str(path), "run_id": "studio"}
        )
        assert evolved["previous_version"] == 0 and evolved["label_table"]

        failures = {}
        for name, override in (
            ("wrong key", {"api_key_env": "WRONG_KEY"}),
            ("unreachable", {"base_url": nowhere}),
        ):
            began = time.monotonic()
            failed = await client.threads.create()
            run = await client.runs.create(
                failed["thread_id"],
                "rollout",
                input={"task_id": "kv_train_0"},
                context={**context, "store_path": "", **override},
            )
            await client.runs.join(failed["thread_id"], run["run_id"])
            state = await client.threads.get(failed["thread_id"])
            failures[name] = (json.dumps(state.get("error") or state), time.monotonic() - began)
        assert (
            f"the server at {server.endpoint.base_url} refused the API key"
            in (failures["wrong key"][0])
        )
        assert f"the server at {nowhere} did not answer within" in failures["unreachable"][0]
        assert failures["unreachable"][1] < 60  # the 3 s budget, not minutes of silence

        for thread_ in await client.threads.search(limit=100):
            seen.append(json.dumps(thread_, default=str))
            seen.append(json.dumps(await client.threads.get_history(thread_["thread_id"])))
            for run in await client.runs.list(thread_["thread_id"]):
                seen.append(json.dumps(run, default=str))
    assert seen and not [text for text in seen if key in text]
    stored = [p for p in (ROOT / ".langgraph_api").rglob("*") if p.is_file()]
    assert stored, "langgraph dev wrote nothing to disk: nothing was checked"
    assert [p for p in stored if key.encode() in p.read_bytes()] == []


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
