"""Measure the swap probe's check on float32: noise with the right weights, gap when stale.

    .venv/bin/python benchmarks/probe_check.py

Needs the learning benchmark's vanilla-GRPO seed-0 run directory (its traces, adapters
of iterations 2 and 3 and the merged iteration-3 checkpoint; `benchmarks/learning.py`
makes it). A float32 server without LoRA loads iteration 3; on 5 of the run's served
prompts the probe is answered ahead by the trainer with iteration 3 (right weights: the
gap is the noise) and with iteration 2 (what a server one iteration stale would show),
for 1 answer token without runners-up, 1 with 4, and 2 with 4. The figures behind
`PROBE_CHECKS` in `training/weight_sync.py` come from this script (2026-12-01).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from seal_graph import ModelServer, ServerSettings
from seal_graph.training.policy import Policy
from seal_graph.training.settings import LoraSettings
from seal_graph.training.weight_sync import (
    Probe,
    ProbeCheck,
    WeightSync,
    probe_check,
    reference_probe,
)

RUN = Path("runs/bench-learning/vanilla-grpo-s0")
BASE = Path("runs/bench-learning/warm-start-model")


def policy_at(step: int) -> Policy:
    policy = Policy(BASE, LoraSettings())
    policy.load_adapter(RUN / f"adapters/step-{step}")
    return policy


def main() -> None:
    calls = sqlite3.connect(RUN / "traces.sqlite").execute(
        "select prompt_token_ids, completion_token_ids from llm_calls limit 200"
    )
    prompts = [json.loads(p) + json.loads(c)[:3] for p, c in calls.fetchall()[::40][:5]]
    new, old = policy_at(3), policy_at(2)
    settings = ServerSettings(model=str(BASE), dtype="float32", enable_lora=False)
    with ModelServer.start(settings) as server:
        sync = WeightSync(server.endpoint, "full", probe_check("float32"))
        sync.current = BASE
        first = reference_probe(
            Probe(prompt_token_ids=prompts[0], completion_token_ids=[0]), new, sync.check
        )
        report = sync.swap(RUN / "merged/step-3", "step-3", first, new.completion_logprobs)
        print(f"swap ok={report.ok} {report.seconds:.2f} s, gap {report.mean_logprob_diff:.2e}")
        for tokens, k in ((1, 0), (1, 4), (2, 4)):
            check = ProbeCheck(tolerance=1.0, answer_tokens=tokens, alternatives=k)
            for prompt in prompts:
                probe = Probe(prompt_token_ids=prompt, completion_token_ids=[0])
                right = reference_probe(probe, new, check)
                stale = reference_probe(probe, old, check)
                began = time.perf_counter()
                noise = sync.gap(right, new.completion_logprobs)
                seconds = time.perf_counter() - began
                change = sync.gap(stale, old.completion_logprobs)
                print(
                    f"tokens={tokens} runners-up={k} prompt={len(prompt)}: right weights "
                    f"mean {noise[0]:.2e} max {noise[1]:.2e} | one iteration stale mean "
                    f"{change[0]:.2e} max {change[1]:.2e} | probe {seconds:.2f} s"
                )


if __name__ == "__main__":
    main()
