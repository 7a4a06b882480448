"""The policy card and access middlewares on a FastAPI app, registered in the order vLLM's
server registers seal-graph's `--middleware` functions: every answer names the weights
that answered; the card, like every route but /health, needs the key."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from seal_graph.serving import access, policy_card
from seal_graph.serving.policy_card import HEADER, ROUTE, SERVED_NAME_ENV, PolicyCard


@pytest.fixture
def client(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "sekrit")
    monkeypatch.setenv(SERVED_NAME_ENV, "seal-agent")
    monkeypatch.setattr(policy_card, "_card", PolicyCard())

    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        return JSONResponse({"data": [{"id": "seal-agent"}]})

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:  # the body still reaches the route
        return JSONResponse({"model": (await request.json())["model"]})

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({})

    app.middleware("http")(policy_card.policy_card)  # as vLLM registers a function
    app.middleware("http")(access.require_api_key)  # registered last: outermost
    return TestClient(app)


KEY = {"Authorization": "Bearer sekrit"}


def test_every_answer_names_the_policy_version_a_swap_published(client) -> None:
    assert client.get("/v1/models", headers=KEY).headers[HEADER] == "base"
    card = {"version": "step-6", "weights": "/runs/x/adapters/step-6", "method": "lora"}
    assert client.post(ROUTE, json=card, headers=KEY).status_code == 200
    assert client.get("/v1/models", headers=KEY).headers[HEADER] == "step-6"
    shown = client.get(ROUTE, headers=KEY).json()
    assert {k: shown[k] for k in card} == card and shown["updated"] > 0


def test_an_adapter_requested_by_name_is_named_in_the_header(client) -> None:
    client.post(ROUTE, json={"version": "step-2"}, headers=KEY)
    for model, header in (("seal-agent", "step-2"), ("seal-failure-agent", "seal-failure-agent")):
        answer = client.post("/v1/chat/completions", json={"model": model}, headers=KEY)
        assert answer.json() == {"model": model}  # the middleware read the body; so did vLLM
        assert answer.headers[HEADER] == header


def test_a_restored_card_keeps_the_time_its_weights_changed(client) -> None:
    card = {"version": "step-3", "weights": "/w", "method": "full", "updated": 1000.0}
    client.post(ROUTE, json=card, headers=KEY)
    assert client.get(ROUTE, headers=KEY).json()["updated"] == 1000.0
    client.post(ROUTE, json={"version": "step-4"}, headers=KEY)
    assert client.get(ROUTE, headers=KEY).json()["updated"] > 1000.0  # a swap: now


def test_the_card_needs_the_key_and_a_valid_card(client) -> None:
    assert client.get(ROUTE).status_code == 401
    forged = {"version": "step-99"}
    assert (
        client.post(ROUTE, json=forged, headers={"Authorization": "Bearer no"}).status_code == 401
    )
    assert client.post(ROUTE, json={"version": ""}, headers=KEY).status_code == 422
    assert client.post(ROUTE, json={"method": "magic"}, headers=KEY).status_code == 422
    assert client.get("/v1/models", headers=KEY).headers[HEADER] == "base"


def test_only_the_health_check_answers_without_the_key(client) -> None:
    assert client.get("/health").status_code == 200
    for path in ("/v1/models", "/docs", "/openapi.json", "/anything"):
        refused = client.get(path)
        assert refused.status_code == 401, path
        assert "API key" in refused.json()["error"]
    assert client.get("/v1/models", headers={"Authorization": "sekrit"}).status_code == 401
    assert client.get("/openapi.json", headers=KEY).status_code == 200
