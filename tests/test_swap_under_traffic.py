"""A served agent other clients can rely on while it trains, on the real CPU server.

Outside clients (the plain `openai` client, no retries) keep sending chat requests —
streamed with a forced tool call, with logprobs, and plain completions with logprobs —
while the trainer's verified swaps go through: two LoRA swaps under the stable name and
a full in-place reload of the base. Not one request may fail, and the
`X-Seal-Policy-Version` header of their answers follows the swaps. Then the server is
killed: its supervisor restarts it and loads the weights its policy card named.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import openai
import pytest
import torch

from seal_graph import ModelServer, ServerSettings
from seal_graph.serving.policy_card import HEADER
from seal_graph.serving.weights import ServerWeights
from seal_graph.training.policy import Policy
from seal_graph.training.settings import LoraSettings
from seal_graph.training.weight_sync import Probe, WeightSync, probe_check, reference_probe

pytestmark = [pytest.mark.server, pytest.mark.slow]

BASE, AGENT = "seal-agent-base", "seal-agent"
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
QUESTION = [{"role": "user", "content": "What is 2 + 3? Use the tool."}]


class OutsideClient:
    """Sends requests in a loop from its own thread; records each answer's policy version
    and every failure."""

    def __init__(self, server: ModelServer, model: str) -> None:
        self.client = openai.OpenAI(
            base_url=server.endpoint.base_url,
            api_key=server.endpoint.api_key,
            max_retries=0,  # a failure must show, not be retried away
            timeout=120,
        )
        self.model = model
        self.versions: list[str] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _requests(self) -> list[Callable]:
        chat = self.client.chat.completions.with_raw_response
        return [
            lambda: chat.create(
                model=self.model, messages=QUESTION, tools=[ADD], stream=True, max_tokens=32,
                tool_choice={"type": "function", "function": {"name": "add"}},
            ),
            lambda: chat.create(
                model=self.model, messages=QUESTION, max_tokens=16, logprobs=True, top_logprobs=2
            ),
            lambda: self.client.completions.with_raw_response.create(
                model=self.model, prompt="2 + 3 =", max_tokens=16, logprobs=1
            ),
        ]  # fmt: skip

    def _loop(self) -> None:
        requests = self._requests()
        sent = 0
        while not self._stop.is_set():
            try:
                raw = requests[sent % len(requests)]()
                answer = raw.parse()
                if hasattr(answer, "__iter__") and not hasattr(answer, "choices"):
                    assert any(chunk.choices for chunk in answer), "an empty stream"
                else:
                    assert answer.choices, "no choices"
                self.versions.append(raw.headers[HEADER])
            except Exception as exc:  # every kind of failure counts
                self.failures.append(f"{type(exc).__name__}: {exc}")
            sent += 1

    def __enter__(self) -> OutsideClient:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=180)


def changed_policy(base_dir) -> Policy:
    """The bundled model with a random (seeded) LoRA update: answers that differ."""
    policy = Policy(base_dir, LoraSettings())
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, weight in policy.model.named_parameters():
            if "lora_B" in name:
                weight.copy_(torch.randn(weight.shape, generator=generator) * 0.02)
    return policy


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_outside_requests_never_fail_through_swaps_and_a_restart(tmp_path, tokenizer) -> None:
    settings = ServerSettings(port=0, dtype="float32", served_model_name=BASE)
    with ModelServer.start(settings) as server:
        server.supervise()  # as `seal-graph serve` does: restores from the policy card
        policy = changed_policy(server.model_dir)
        adapter = policy.save_adapter(tmp_path / "adapter")
        merged = policy.save_merged(tmp_path / "merged")
        prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True)
        prompt = prompt["input_ids"] if hasattr(prompt, "keys") else prompt  # a BatchEncoding
        check = probe_check("float32")  # answered ahead with runners-up, as the loop does
        probe = Probe(prompt_token_ids=list(prompt), completion_token_ids=[0] * 8)
        probe = reference_probe(probe, policy, check)
        assert probe.alternative_ids, "the float32 probe compares runners-up"
        score = policy.completion_logprobs
        lora = WeightSync(server.endpoint.model_copy(update={"model": AGENT}), "lora", check)
        full = WeightSync(server.endpoint, "full", check)
        with OutsideClient(server, BASE) as on_base:
            wait_for(lambda: len(on_base.versions) >= 3, 120, "requests before the swaps")
            assert lora.swap(adapter, "step-1", probe, score).ok
            with OutsideClient(server, AGENT) as on_agent:
                wait_for(lambda: len(on_agent.versions) >= 3, 120, "requests on the adapter")
                assert lora.swap(adapter, "step-2", probe, score).ok  # in place, in use
                wait_for(lambda: "step-2" in on_agent.versions[-2:], 120, "step-2 answers")
                report = full.swap(merged, "full-1", probe, score)
                assert report.ok, report.error
                wait_for(lambda: "full-1" in on_base.versions[-2:], 120, "full-1 answers")
        for client in (on_base, on_agent):
            assert client.failures == [], client.failures[:3]
        seen = list(dict.fromkeys(on_base.versions))  # versions in the order they appeared
        assert seen == ["base", "step-1", "step-2", "full-1"], seen
        print(f"outside requests answered: {len(on_base.versions) + len(on_agent.versions)}")

        wait_for(lambda: server.card.version == "full-1", 30, "the supervisor to read the card")
        os.killpg(server.process.pid, signal.SIGKILL)
        wait_for(lambda: server.restarts == 1 and server.running, 600, "the restart")
        weights = ServerWeights(server.endpoint)
        wait_for(lambda: (weights.card() or server.card).version == "full-1", 120, "restore")
        weights.close()
        assert server.supervision_failed is None
        restored = full.gap(probe, score)[0]
        assert restored < full.tolerance, "the restarted server serves the trained weights"
        lora.close()
        full.close()
