"""A toolkit that reports errors its own way: langchain-community's `RequestsToolkit`
returns a 404's body, and `repr(exception)` for a request it could not make, as plain
text. Without `is_error=` those calls are stored as successes; with it, as tool errors
the diagnosis sees. Against a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from langchain_community.agent_toolkits.openapi.toolkit import RequestsToolkit
from langchain_community.utilities.requests import TextRequestsWrapper

from seal_graph.environment import Task
from seal_graph.records import Verdict
from seal_graph.reference import replay_calls
from seal_graph.tools.langchain_env import from_langchain_tools


class Shop(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        found = self.path == "/items/1"
        body = {"id": 1, "name": "pen"} if found else {"detail": "Not Found"}
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def shop() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Shop)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def http_error(output: str) -> bool:
    """This service's errors: FastAPI-style `detail` bodies, and the toolkit's
    `repr(exception)` for a request it could not make."""
    return '"detail"' in output or output.startswith(("JSONDecodeError(", "ConnectionError("))


def shop_env(is_error=None):
    task = Task(id="t", turns=["Get item 1."], reference=[[]])
    return from_langchain_tools(
        "shop",
        tasks=[task],
        tools=lambda state: RequestsToolkit(
            requests_wrapper=TextRequestsWrapper(), allow_dangerous_requests=True
        ).get_tools(),
        verify=lambda task, state, episode: Verdict(reward=0.0, success=False),
        is_error=is_error,
    )


def calls(shop: str) -> list[list[dict]]:
    return [
        [
            {"name": "requests_get", "args": {"url": f"{shop}/items/1"}},
            {"name": "requests_get", "args": {"url": f"{shop}/items/9"}},  # 404
            {"name": "requests_post", "args": {"text": "{not json"}},  # repr(exception)
        ]
    ]


def test_requests_toolkit_errors_are_tool_errors_with_is_error(shop: str) -> None:
    env = shop_env(is_error=http_error)
    episode, _ = asyncio.run(replay_calls(env, env.tasks()[0], calls(shop)))
    ok, missing, broken = episode.tool_events
    assert ok.status == "ok" and '"pen"' in ok.output
    assert (missing.status, missing.error_kind) == ("error", "tool_exception")
    assert "Not Found" in missing.output
    assert (broken.status, broken.error_kind) == ("error", "tool_exception")


def test_without_is_error_the_same_failures_pass_as_successes(shop: str) -> None:
    env = shop_env()
    episode, _ = asyncio.run(replay_calls(env, env.tasks()[0], calls(shop)))
    assert [event.status for event in episode.tool_events] == ["ok", "ok", "ok"]
