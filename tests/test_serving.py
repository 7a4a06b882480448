"""The real server: chat, forced tool calls, served token ids, plain OpenAI clients."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import openai
import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool

from seal_graph import ModelServer, served_tokens

pytestmark = pytest.mark.server


@tool
def get_weather(city: str) -> str:
    """Return the current weather for a city."""
    return f"sunny in {city}"


def test_chat_returns_text_whose_token_ids_decode_to_it(
    server: ModelServer, tokenizer, served_text
) -> None:
    llm = server.chat_model(temperature=0.0, max_tokens=40, return_token_ids=True)
    reply = llm.invoke([HumanMessage("Name one colour of the rainbow.")])
    tokens = served_tokens(reply)
    assert tokens is not None
    assert reply.content.strip()
    assert len(tokens.completion_logprobs) == len(tokens.completion_token_ids)
    assert all(lp <= 0.0 for lp in tokens.completion_logprobs)
    decoded = served_text(tokens.completion_token_ids)
    assert decoded == reply.content
    prompt = tokenizer.decode(tokens.prompt_token_ids)
    assert prompt.endswith("Name one colour of the rainbow.<|im_end|>\n<|im_start|>assistant\n")


def test_forced_tool_call_is_parsed(server: ModelServer) -> None:
    llm = server.chat_model(temperature=0.0, max_tokens=60, return_token_ids=True)
    reply = llm.bind_tools([get_weather], tool_choice="required").invoke(
        [SystemMessage("Use the tools."), HumanMessage("What is the weather in Paris?")]
    )
    assert len(reply.tool_calls) >= 1
    call = reply.tool_calls[0]
    assert call["name"] == "get_weather"
    assert isinstance(call["args"].get("city"), str)
    assert served_tokens(reply).completion_token_ids


def test_auto_tool_call_uses_hermes_format_and_tokens_match(
    server: ModelServer, served_text
) -> None:
    """With tool_choice=auto the served tokens are the template's <tool_call> block, which
    vLLM's hermes parser turns into a structured call — the tokens a trainer will see."""
    llm = server.chat_model(temperature=0.0, max_tokens=60, return_token_ids=True)
    reply = llm.bind_tools([get_weather]).invoke(
        [
            SystemMessage("Always call a tool to answer."),
            HumanMessage("What is the weather in Paris? Call get_weather."),
        ]
    )
    raw = served_text(served_tokens(reply).completion_token_ids)
    if reply.tool_calls:
        assert "<tool_call>" in raw
        assert reply.tool_calls[0]["name"] == "get_weather"
    else:  # the model chose to answer in text: then the text is exactly the tokens
        assert raw == reply.content


async def test_concurrent_async_calls(server: ModelServer) -> None:
    llm = server.chat_model(temperature=1.0, max_tokens=16, return_token_ids=True)
    replies = await asyncio.gather(
        *(llm.ainvoke([HumanMessage(f"Count to {n}.")]) for n in range(3, 9))
    )
    assert all(served_tokens(r).completion_token_ids for r in replies)


def test_the_key_is_required_and_never_on_the_command_line_or_in_the_log(
    server: ModelServer,
) -> None:
    key = server.endpoint.api_key
    cmdline = Path(f"/proc/{server.process.pid}/cmdline").read_bytes().decode()
    assert key not in cmdline
    assert key not in server.log_path.read_text(errors="replace")
    response = httpx.get(f"{server.endpoint.base_url}/models", timeout=10)
    assert response.status_code == 401


def test_plain_openai_client_with_key(server: ModelServer) -> None:
    client = openai.OpenAI(base_url=server.endpoint.base_url, api_key=server.endpoint.api_key)
    models = [m.id for m in client.models.list()]
    assert server.endpoint.model in models
    bad = openai.OpenAI(base_url=server.endpoint.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_every_route_but_the_health_checks_needs_the_key(server: ModelServer) -> None:
    """Walks the running server's own route list, each path with its own methods and with
    OPTIONS and HEAD: without the key, each answers 401 but the allowed ones; a CORS
    preflight answers only CORS (no route's content); with the key, each gets past the
    check (POSTs carry a malformed body, so the routes that take one refuse it as their
    own 400 instead of acting)."""
    from seal_graph.serving.access import ALLOWED

    root = server.endpoint.server_root
    key = {"Authorization": f"Bearer {server.endpoint.api_key}"}
    assert httpx.get(f"{root}/openapi.json", timeout=10).status_code == 401
    spec = httpx.get(f"{root}/openapi.json", headers=key, timeout=10).json()
    paths = [*spec["paths"], "/docs", "/redoc", "/seal/policy", "/metrics/", "/metricsX"]
    routes = [
        (method.upper(), path) for path, methods in spec["paths"].items() for method in methods
    ]
    routes += [("GET", "/docs"), ("GET", "/redoc"), ("GET", "/seal/policy")]
    routes += [(method, path) for path in paths for method in ("OPTIONS", "HEAD")]
    assert {("POST", "/invocations"), ("POST", "/pause"), ("GET", "/metrics")} <= set(routes)
    open_without_key, refused_with_key, preflight_leaks = [], [], []
    preflight = {"Origin": "http://elsewhere", "Access-Control-Request-Method": "GET"}
    try:
        with httpx.Client(base_url=root, timeout=60) as http:
            for method, path in routes:
                url = path.replace("{response_id}", "x").replace("{adapter_name}", "x")
                body = b"{" if method == "POST" else None
                plain = {"Content-Type": "application/json", "Connection": "close"}
                bare = http.request(method, url, content=body, headers=plain)
                if (bare.status_code == 401) == (path in ALLOWED):
                    open_without_key.append((method, path, bare.status_code))
                keyed = http.request(method, url, content=body, headers={**plain, **key})
                if keyed.status_code == 401:
                    refused_with_key.append((method, path))
            for path in paths:
                answer = http.options(path.replace("{response_id}", "x"), headers=preflight)
                if len(answer.content) > 40 or "text/plain" not in answer.headers.get(
                    "content-type", "text/plain"
                ):
                    preflight_leaks.append((path, answer.status_code, answer.text[:80]))
    finally:  # the walk's keyed calls to /sleep and /pause must not leave the engine idle
        httpx.post(f"{root}/wake_up", headers=key, timeout=60)
        httpx.post(f"{root}/resume", headers=key, timeout=60)
    assert open_without_key == [] and refused_with_key == [] and preflight_leaks == []
    reply = server.chat_model(temperature=0.0, max_tokens=4).invoke([HumanMessage("Hi")])
    assert reply.content  # the server still answers after the walk


def test_deep_json_is_a_client_error_and_weights_load_only_from_allowed_roots(
    server: ModelServer, tmp_path: Path
) -> None:
    """vLLM itself would answer JSON nested 100,000 deep with a 500 and a traceback: the
    guard answers 400 first, keyed or not, on every path; an adapter outside the server's
    weight roots (here `/etc`, and a symlink out of the run's folder) is refused with the
    roots named, and the server answers as before."""
    root = server.endpoint.server_root
    key = {"Authorization": f"Bearer {server.endpoint.api_key}"}
    json_type = {"Content-Type": "application/json"}
    deep = b"[" * 100_000 + b"]" * 100_000
    for path, headers in (
        ("/ping", json_type),
        ("/health", json_type),
        ("/v1/chat/completions", {**json_type, **key}),
        ("/v1/completions", {**json_type, **key}),
        ("/seal/policy", {**json_type, **key}),
        ("/v1/chat/completions", key),  # no content type: FastAPI reads it as JSON
    ):
        answer = httpx.post(f"{root}{path}", content=deep, headers=headers, timeout=60)
        assert 200 <= answer.status_code < 500, (path, answer.status_code)
    (tmp_path / "escape").symlink_to("/etc")
    for outside in ("/etc", str(tmp_path / "escape")):
        body = {"lora_name": "x", "lora_path": outside}
        refused = httpx.post(f"{root}/v1/load_lora_adapter", json=body, headers=key, timeout=60)
        assert refused.status_code == 403, outside
        assert "loads weights from" in refused.json()["error"]
    reply = server.chat_model(temperature=0.0, max_tokens=4).invoke([HumanMessage("Hi")])
    assert reply.content
