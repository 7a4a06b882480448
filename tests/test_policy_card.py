"""The policy card, guard and access middlewares on a FastAPI app, registered in the order
vLLM's server registers seal-graph's `--middleware` functions: every answer names the
weights that answered; the card, like every route but /health, needs the key; a key
holder's requests stay bounded (weights from allowed roots, capped sampling, JSON that
parses)."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from seal_graph.serving import access, guards, policy_card
from seal_graph.serving.policy_card import HEADER, ROUTE, SERVED_NAME_ENV, PolicyCard


@pytest.fixture
def client(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_API_KEY", "sekrit")
    monkeypatch.setenv(SERVED_NAME_ENV, "seal-agent")
    monkeypatch.setenv(guards.WEIGHT_ROOTS_ENV, str(tmp_path / "run"))
    monkeypatch.setenv(guards.MAX_CHOICES_ENV, "8")
    monkeypatch.setenv(guards.MAX_SAMPLED_TOKENS_ENV, "4096")
    monkeypatch.setattr(policy_card, "_card", PolicyCard())

    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        return JSONResponse({"data": [{"id": "seal-agent"}]})

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:  # the body still reaches the route
        return JSONResponse({"model": (await request.json())["model"]})

    async def health() -> JSONResponse:  # as vLLM's: never reads the body
        return JSONResponse({})

    async def metrics() -> JSONResponse:  # as vLLM's mount: any method gets the text
        return JSONResponse({"secret": "per-route counts"})

    async def load() -> JSONResponse:
        return JSONResponse({"loaded": True})

    for path in ("/health", "/ping"):
        app.add_api_route(path, health, methods=["GET", "POST"], include_in_schema=False)
    app.add_api_route("/metrics", metrics, methods=["GET", "POST", "OPTIONS", "HEAD", "DELETE"])
    for path in ("/v1/load_lora_adapter", "/collective_rpc"):
        app.add_api_route(path, load, methods=["POST"], include_in_schema=False)

    app.middleware("http")(policy_card.policy_card)  # as vLLM registers a function
    app.middleware("http")(guards.guard_requests)
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


def test_options_and_head_need_the_key_but_a_cors_preflight_is_let_through(client) -> None:
    for method in ("OPTIONS", "HEAD", "DELETE"):
        for path in ("/metrics", "/metrics/", "/metricsX", ROUTE):
            assert client.request(method, path).status_code == 401, (method, path)
    preflight = {"Origin": "http://x", "Access-Control-Request-Method": "GET"}
    assert client.options("/v1/models", headers=preflight).status_code != 401


def test_the_card_answers_get_and_post_only(client) -> None:
    for method in ("OPTIONS", "DELETE", "PUT", "PATCH", "HEAD"):
        answer = client.request(method, ROUTE, headers=KEY)
        assert answer.status_code == 405, method
        assert "weights" not in answer.text
    assert client.get(ROUTE, headers=KEY).status_code == 200


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_open_paths_never_read_a_body_and_deep_json_is_a_client_error(client) -> None:
    """The health checks answer whatever is sent (no body is parsed there, for anyone);
    JSON nested past Python's recursion limit is a 400 on the routes that read it,
    never a 500; the card refuses it too."""
    deep = _nested(100_000)
    for path in ("/health", "/ping"):
        assert client.post(path, content=deep, headers=JSON).status_code == 200
    for path in ("/v1/chat/completions", ROUTE):
        refused = client.post(path, content=deep, headers={**KEY, **JSON})
        assert refused.status_code == 400, path
        assert "nested too deeply" in refused.json()["error"]
    assert client.post("/v1/models", content=deep, headers=JSON).status_code == 401


JSON = {"Content-Type": "application/json"}


def test_weights_load_only_from_the_allowed_roots(client, tmp_path) -> None:
    inside = tmp_path / "run" / "adapters" / "step-1"
    inside.mkdir(parents=True)
    (tmp_path / "run" / "escape").symlink_to(tmp_path)

    def lora(path: str):
        body = {"lora_name": "seal-agent", "lora_path": path, "load_inplace": True}
        return client.post("/v1/load_lora_adapter", json=body, headers=KEY)

    assert lora(str(inside)).status_code == 200
    for outside in (
        str(tmp_path),
        f"{inside}/../../..",
        str(tmp_path / "run" / "escape" / "elsewhere"),
        "/etc",
    ):
        refused = lora(outside)
        assert refused.status_code == 403, outside
        assert str((tmp_path / "run").resolve()) in refused.json()["error"]
    assert lora("adapters/step-1").status_code == 400  # relative: refused, with the roots
    reload = {"method": "reload_weights", "kwargs": {"weights_path": "/etc"}}
    assert client.post("/collective_rpc", json=reload, headers=KEY).status_code == 403
    other = {"method": "get_model_info"}  # not a load: no path to check
    assert client.post("/collective_rpc", json=other, headers=KEY).status_code == 200


def test_sampling_is_capped_with_a_clear_error(client) -> None:
    def chat(**sampling):
        body = {"model": "seal-agent", **sampling}
        return client.post("/v1/chat/completions", json=body, headers=KEY)

    assert chat(n=8, max_tokens=512).status_code == 200
    too_many = chat(n=1000, max_tokens=1)
    assert too_many.status_code == 400 and "n=1000" in too_many.json()["error"]
    too_long = chat(n=8, max_completion_tokens=1024)
    assert too_long.status_code == 400 and "4096" in too_long.json()["error"]
