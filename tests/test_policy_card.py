"""The policy card middleware on a FastAPI app, registered as vLLM's server registers a
`--middleware` function: every answer names the policy version; the card needs the key."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from seal_graph.serving import policy_card
from seal_graph.serving.policy_card import HEADER, ROUTE, PolicyCard


@pytest.fixture
def client(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "sekrit")
    monkeypatch.setattr(policy_card, "_card", PolicyCard())

    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        return JSONResponse({"data": [{"id": "seal-agent"}]})

    app.middleware("http")(policy_card.policy_card)  # as vLLM registers a function
    return TestClient(app)


KEY = {"Authorization": "Bearer sekrit"}


def test_every_answer_names_the_policy_version_a_swap_published(client) -> None:
    assert client.get("/v1/models").headers[HEADER] == "base"
    card = {"version": "step-6", "weights": "/runs/x/adapters/step-6", "method": "lora"}
    assert client.post(ROUTE, json=card, headers=KEY).status_code == 200
    assert client.get("/v1/models").headers[HEADER] == "step-6"
    shown = client.get(ROUTE, headers=KEY).json()
    assert {k: shown[k] for k in card} == card and shown["updated"] > 0


def test_the_card_needs_the_key_and_a_valid_card(client) -> None:
    assert client.get(ROUTE).status_code == 401
    forged = {"version": "step-99"}
    assert (
        client.post(ROUTE, json=forged, headers={"Authorization": "Bearer no"}).status_code == 401
    )
    assert client.post(ROUTE, json={"version": ""}, headers=KEY).status_code == 422
    assert client.post(ROUTE, json={"method": "magic"}, headers=KEY).status_code == 422
    assert client.get("/v1/models").headers[HEADER] == "base"
