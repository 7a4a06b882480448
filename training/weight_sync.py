"""Hot-swap trained weights into the running vLLM server, verified, with rollback.

Two ways, both over HTTP, so they work on CPU and GPU alike (TRL's own vLLM weight sync
needs CUDA/NCCL):

* `lora`: the adapter is written in PEFT format and loaded with vLLM's runtime adapter
  API under the stable served name (`/v1/load_lora_adapter`, `load_inplace`); clients
  asking for that name get the new adapter from the next request on.
* `full`: base + adapter are merged into a full checkpoint and reloaded in place
  (`/collective_rpc reload_weights`) between `/pause?mode=keep` and `/resume`, so
  in-flight requests are frozen, not failed, and finish on the new weights.

Every swap is verified: the server's logprobs of a fixed probe (prompt + completion
tokens, via `prompt_logprobs`) must match the trainer's within a tolerance on the mean
absolute per-token difference (vLLM's and torch's float kernels differ slightly, most on
very unlikely tokens; wrong weights differ by far more). A mismatch (or a failed load)
rolls back to the previous weights and is reported.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, Field

from seal_graph.errors import ServerError
from seal_graph.serving import ModelEndpoint


class Probe(BaseModel):
    """A fixed prompt and completion whose logprobs identify the served weights."""

    prompt_token_ids: list[int]
    completion_token_ids: list[int]


class SwapReport(BaseModel):
    """What one swap did and how long the server took to serve the new weights."""

    ok: bool
    method: Literal["lora", "full"]
    version: str
    seconds: float = Field(description="From the request to a verified answer.")
    max_logprob_diff: float | None = None
    rolled_back: bool = False
    error: str | None = None


class WeightSync:
    """Swaps weights into one server under one stable name."""

    def __init__(
        self,
        endpoint: ModelEndpoint,
        method: Literal["lora", "full"],
        tolerance: float = 0.05,
        timeout_s: float = 300.0,
    ) -> None:
        self.endpoint, self.method, self.tolerance = endpoint, method, tolerance
        self._http = httpx.Client(
            timeout=timeout_s, headers={"Authorization": f"Bearer {endpoint.api_key}"}
        )
        self.current: Path | None = None  # what the server serves now

    def close(self) -> None:
        self._http.close()

    def restore(self) -> None:
        """Load the current weights again (after the server restarted without them)."""
        if self.current is not None:
            self._load(self.current)

    def _post(self, path: str, **kwargs) -> httpx.Response:
        response = self._http.post(f"{self.endpoint.server_root}{path}", **kwargs)
        if response.status_code >= 400:
            raise ServerError(f"{path} answered HTTP {response.status_code}: {response.text[:500]}")
        return response

    def _load(self, weights: Path) -> None:
        if self.method == "lora":
            self._post(
                "/v1/load_lora_adapter",
                json={
                    "lora_name": self.endpoint.model,
                    "lora_path": str(weights),
                    "load_inplace": True,
                },
            )
            return
        self._post("/pause", params={"mode": "keep"})
        try:
            self._post(
                "/collective_rpc",
                json={"method": "reload_weights", "kwargs": {"weights_path": str(weights)}},
            )
        finally:
            self._post("/resume")

    def served_logprobs(self, probe: Probe) -> list[float]:
        """The server's logprobs of the probe's completion tokens."""
        ids = probe.prompt_token_ids + probe.completion_token_ids
        response = self._post(
            "/v1/completions",
            json={
                "model": self.endpoint.model,
                "prompt": ids,
                "max_tokens": 1,
                "temperature": 0.0,
                "prompt_logprobs": 0,
            },
        )
        entries = response.json()["choices"][0]["prompt_logprobs"]
        tail = entries[len(probe.prompt_token_ids) :]
        return [
            entry[str(token)]["logprob"]
            for entry, token in zip(tail, probe.completion_token_ids, strict=True)
        ]

    def swap(self, weights: Path, version: str, probe: Probe, expected: list[float]) -> SwapReport:
        """Load `weights`, verify against `expected` probe logprobs, roll back if wrong."""
        began = time.perf_counter()
        try:
            self._load(weights)
            served = self.served_logprobs(probe)
        except (ServerError, httpx.HTTPError, KeyError) as exc:
            return self._rollback(version, began, error=f"{type(exc).__name__}: {exc}")
        gaps = [abs(a - b) for a, b in zip(served, expected, strict=True)] or [0.0]
        diff, mean_gap = max(gaps), sum(gaps) / len(gaps)
        if mean_gap > self.tolerance:
            return self._rollback(
                version,
                began,
                diff=diff,
                error=(
                    f"served logprobs differ from the trainer's by {mean_gap:.4f} on average "
                    f"(max {diff:.4f}; tolerance {self.tolerance})"
                ),
            )
        self.current = weights
        return SwapReport(
            ok=True,
            method=self.method,
            version=version,
            seconds=time.perf_counter() - began,
            max_logprob_diff=diff,
        )

    def _rollback(
        self, version: str, began: float, error: str, diff: float | None = None
    ) -> SwapReport:
        rolled_back = False
        if self.current is not None:
            try:
                self._load(self.current)
                rolled_back = True
            except (ServerError, httpx.HTTPError) as exc:
                error += f"; rollback to {self.current} failed too: {exc}"
        return SwapReport(
            ok=False,
            method=self.method,
            version=version,
            seconds=time.perf_counter() - began,
            max_logprob_diff=diff,
            rolled_back=rolled_back,
            error=error,
        )
