"""Load weights into a running vLLM server, and publish which ones it serves.

The two HTTP ways a server takes new weights without restarting (used by the trainer's
verified swaps and by a supervisor restoring a restarted server):

* `lora`: the adapter (PEFT format) is loaded under the stable served name with vLLM's
  runtime adapter API (`/v1/load_lora_adapter`, `load_inplace`); the next request uses it.
* `full`: a full checkpoint is reloaded in place (`/collective_rpc reload_weights`)
  between `/pause?mode=keep` and `/resume`, so in-flight requests are frozen, not failed,
  and finish on the new weights (loopback servers only; like every route of a server
  seal-graph starts, these need the API key: `seal_graph.serving.access`).

The policy card (`seal_graph.serving.policy_card`) records what was loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import httpx

from seal_graph.errors import ServerError
from seal_graph.serving.endpoint import ModelEndpoint
from seal_graph.serving.policy_card import ROUTE, PolicyCard

SwapMethod = Literal["lora", "full"]


class ServerWeights:
    """HTTP access to one server's weights and policy card, with its API key."""

    def __init__(self, endpoint: ModelEndpoint, timeout_s: float = 300.0) -> None:
        self.endpoint = endpoint
        self._http = httpx.Client(
            timeout=timeout_s, headers={"Authorization": f"Bearer {endpoint.api_key}"}
        )

    def close(self) -> None:
        self._http.close()

    def post(self, path: str, **kwargs) -> httpx.Response:
        response = self._http.post(f"{self.endpoint.server_root}{path}", **kwargs)
        if response.status_code >= 400:
            raise ServerError(f"{path} answered HTTP {response.status_code}: {response.text[:500]}")
        return response

    def load(self, method: SwapMethod, weights: Path) -> None:
        """Make the server answer with `weights` (see the module docstring). The path goes
        absolute: the server resolves nothing against its own working directory and
        loads only from its weight roots (`seal_graph.serving.guards`)."""
        weights = Path(weights).resolve()
        if method == "lora":
            self.post(
                "/v1/load_lora_adapter",
                json={
                    "lora_name": self.endpoint.model,
                    "lora_path": str(weights),
                    "load_inplace": True,
                },
            )
            return
        self.post("/pause", params={"mode": "keep"})
        try:
            self.post(
                "/collective_rpc",
                json={"method": "reload_weights", "kwargs": {"weights_path": str(weights)}},
            )
        finally:
            self.post("/resume")

    def publish(self, card: PolicyCard) -> bool:
        """Tell the server's clients which weights answer now (and since when: a restored
        card keeps its time); False where the server has no card (a vLLM that seal-graph
        did not start)."""
        try:
            self.post(ROUTE, json=card.model_dump())
        except ServerError as exc:
            if "HTTP 404" in str(exc):
                return False
            raise
        return True

    def card(self, timeout_s: float = 5.0) -> PolicyCard | None:
        """The server's policy card; None where it has none."""
        response = self._http.get(f"{self.endpoint.server_root}{ROUTE}", timeout=timeout_s)
        if response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise ServerError(
                f"{ROUTE} answered HTTP {response.status_code}: {response.text[:500]}"
            )
        return PolicyCard.model_validate(response.json())

    def restore(self, card: PolicyCard) -> None:
        """Load a card's weights again and republish it (after a restart lost them); the
        base weights are what a restarted server starts with, so only the card goes back."""
        if card.weights is not None and card.method is not None:
            self.load(card.method, Path(card.weights))
        self.publish(card)
