"""Retry policy of the endpoint client: transient failures retried, others not.

Uses a flaky local HTTP stub (not a model): it answers 503 a set number of times, then a
canned chat completion — the behaviour under test is the client's, not the model's."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import openai
import pytest
from langchain_core.messages import HumanMessage

from seal_graph import ServedChatModel
from seal_graph.client import is_retryable
from seal_graph.errors import ServerError

COMPLETION = {
    "id": "x",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "prompt_token_ids": [1, 2, 3],
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "token_ids": [7, 8],
            "message": {"role": "assistant", "content": "hi"},
            "logprobs": {
                "content": [
                    {"token": "h", "logprob": -0.5, "bytes": None, "top_logprobs": []},
                    {"token": "i", "logprob": -0.25, "bytes": None, "top_logprobs": []},
                ]
            },
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}


class FlakyStub:
    def __init__(self, failures: int, status: int) -> None:
        self.failures, self.status, self.requests = failures, status, []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append(body)
                failing = len(stub.requests) <= stub.failures
                payload = json.dumps({"error": "busy"} if failing else COMPLETION).encode()
                self.send_response(stub.status if failing else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Seal-Policy-Version", "step-3")  # as a policy card stamps
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def stub(request: pytest.FixtureRequest) -> Iterator[FlakyStub]:
    failures, status = request.param
    server = FlakyStub(failures, status)
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    yield server
    server.httpd.shutdown()


def make_model(url: str) -> ServedChatModel:
    return ServedChatModel(
        model="m",
        base_url=url,
        api_key="k",
        return_token_ids=True,
        retry_max_wait_s=0.05,
        retry_attempts=4,
    )


@pytest.mark.parametrize("stub", [(2, 503)], indirect=True)
def test_5xx_is_retried_then_succeeds_with_served_tokens_and_version(stub: FlakyStub) -> None:
    reply = make_model(stub.url).invoke([HumanMessage("hello")])
    assert len(stub.requests) == 3
    assert stub.requests[-1]["return_token_ids"] is True
    assert stub.requests[-1]["logprobs"] is True
    tokens = reply.response_metadata["served_tokens"]
    assert tokens == {
        "prompt_token_ids": [1, 2, 3],
        "completion_token_ids": [7, 8],
        "completion_logprobs": [-0.5, -0.25],
        "served_version": "step-3",
    }


@pytest.mark.parametrize("stub", [(10, 503)], indirect=True)
async def test_gives_up_after_the_attempt_limit(stub: FlakyStub) -> None:
    with pytest.raises(ServerError, match=f"the server at {stub.url} did not answer") as failed:
        await make_model(stub.url).ainvoke([HumanMessage("hello")])
    assert isinstance(failed.value.__cause__, openai.APIError)
    assert len(stub.requests) == 4


@pytest.mark.parametrize("stub", [(1, 401)], indirect=True)
def test_a_refused_key_is_named_with_the_url_and_not_retried(stub: FlakyStub) -> None:
    with pytest.raises(ServerError, match=f"the server at {stub.url} refused the API key"):
        make_model(stub.url).invoke([HumanMessage("hello")])
    assert len(stub.requests) == 1


def test_an_unreachable_server_fails_within_the_retry_budget_naming_it() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    model = ServedChatModel(model="m", base_url=url, api_key="k", retry_budget_s=2.0)
    began = time.monotonic()
    with pytest.raises(ServerError, match=f"the server at {url} did not answer within"):
        model.invoke([HumanMessage("hello")])
    assert time.monotonic() - began <= 2.5  # the budget, not the budget plus a last wait


@pytest.mark.parametrize("stub", [(1, 400)], indirect=True)
def test_client_errors_are_not_retried(stub: FlakyStub) -> None:
    with pytest.raises(openai.BadRequestError):
        make_model(stub.url).invoke([HumanMessage("hello")])
    assert len(stub.requests) == 1


def test_connection_refused_is_retryable() -> None:
    request = httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions")
    assert is_retryable(openai.APIConnectionError(request=request))
    assert not is_retryable(ValueError("model mistake"))
