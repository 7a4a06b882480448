"""Measure the swap probe's check per serving dtype: the noise with the right weights, and
the gap when the server is one iteration stale or still serves the base weights.

    .venv/bin/python benchmarks/probe_check.py [--run DIR] [--dtype float32|bfloat16]
        [--swap full|lora]

Needs a run directory of the learning benchmark (`benchmarks/learning.py` makes them):
its config (the base checkpoint), traces (served prompts) and the adapters of at least
two iterations. A server of `--dtype` without LoRA (as `train` serves full swaps) loads
the last iteration merged (`--swap lora`: a LoRA-enabled server loads its adapter, as
coevolve-dpo serves its policy); on `--prompts` of the run's served prompts the probe is
answered ahead by the trainer (float32, as in the loop) with the last iteration (right
weights: the gap is the noise), with the one before (what a server one iteration stale
shows) and with the base (a swap that never happened), for each probe shape in SHAPES.
The figures behind `PROBE_CHECKS` in `training/weight_sync.py` come from this script.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
from pathlib import Path

from seal_graph import DEFAULT_SERVED_NAME, ModelServer, ServerSettings
from seal_graph.training.policy import Policy
from seal_graph.training.settings import LoraSettings
from seal_graph.training.weight_sync import Probe, ProbeCheck, WeightSync, reference_probe

SHAPES = ((1, 0), (2, 0), (1, 4), (2, 4))
"""(answer tokens, runners-up per position) of the probes compared."""


def served_prompts(run: Path, count: int, answer_prefix: int = 3) -> list[list[int]]:
    """`count` prompts spread over the run's served calls, each with its first
    `answer_prefix` completion tokens (3: a position inside an answer, where the agent's
    choices are least certain)."""
    calls = sqlite3.connect(run / "traces.sqlite").execute(
        "select prompt_token_ids, completion_token_ids from llm_calls"
    )
    rows = calls.fetchall()
    picked = rows[:: max(1, len(rows) // count)][:count]
    return [
        json.loads(prompt) + json.loads(completion)[:answer_prefix] for prompt, completion in picked
    ]


def policy_with(base: Path, adapter: Path | None) -> Policy:
    policy = Policy(base, LoraSettings())
    if adapter is not None:
        policy.load_adapter(adapter)
    return policy


def spread(gaps: list[tuple[float, float]]) -> str:
    means, peaks = zip(*gaps, strict=True)
    return f"mean {min(means):.1e} to {max(means):.1e} (max per token {max(peaks):.1e})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=Path("runs/bench-learning/vanilla-grpo-s0"))
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--swap", choices=["full", "lora"], default="full")
    args = parser.parse_args()
    base = Path(json.loads((args.run / "config.json").read_text())["model"])
    adapters = sorted(
        (args.run / "adapters").glob("step-*"), key=lambda p: int(p.name.split("-")[1])
    )
    if len(adapters) < 2:
        raise SystemExit(f"{args.run}/adapters holds {len(adapters)} iterations; 2 are needed")
    new, old, untrained = (
        policy_with(base, adapters[-1]),
        policy_with(base, adapters[-2]),
        policy_with(base, None),
    )
    prompts = served_prompts(args.run, args.prompts)
    lora = args.swap == "lora"
    settings = ServerSettings(
        model=str(base),
        served_model_name=f"{DEFAULT_SERVED_NAME}-base" if lora else DEFAULT_SERVED_NAME,
        dtype=args.dtype,
        enable_lora=lora,
    )
    with tempfile.TemporaryDirectory() as work, ModelServer.start(settings) as server:
        endpoint = server.endpoint.model_copy(update={"model": DEFAULT_SERVED_NAME})
        sync = WeightSync(endpoint, args.swap, ProbeCheck(tolerance=1.0))
        sync.current = base
        probe = Probe(prompt_token_ids=prompts[0], completion_token_ids=[0])
        first = reference_probe(probe, new, sync.check)
        weights = adapters[-1] if lora else new.save_merged(Path(work) / "merged")
        report = sync.swap(weights, adapters[-1].name, first, new.completion_logprobs)
        print(
            f"{args.dtype}, {args.swap}: swap to {adapters[-1].name}: {report.seconds:.2f} s",
            flush=True,
        )
        summary = {}
        for tokens, k in SHAPES:
            check = ProbeCheck(tolerance=1.0, answer_tokens=tokens, alternatives=k)
            gaps: dict[str, list[tuple[float, float]]] = {"right": [], "stale": [], "base": []}
            for prompt in prompts:
                probe = Probe(prompt_token_ids=prompt, completion_token_ids=[0])
                for name, policy in (("right", new), ("stale", old), ("base", untrained)):
                    answer = reference_probe(probe, policy, check)
                    gaps[name].append(sync.gap(answer, policy.completion_logprobs))
            summary[f"{tokens} tokens, {k} runners-up"] = {
                name: [[round(a, 6), round(b, 6)] for a, b in rows] for name, rows in gaps.items()
            }
            print(
                f"{args.dtype}, {args.swap}, {tokens} answer tokens, {k} runners-up, "
                f"{len(prompts)} prompts"
                f" of {min(map(len, prompts))}-{max(map(len, prompts))} tokens: right weights "
                f"{spread(gaps['right'])} | one iteration stale {spread(gaps['stale'])} | "
                f"base weights {spread(gaps['base'])}",
                flush=True,
            )
        print(
            json.dumps(
                {
                    "probe_check": {
                        "dtype": args.dtype,
                        "swap": args.swap,
                        "run": str(args.run),
                        **summary,
                    }
                }
            )
        )


if __name__ == "__main__":
    main()
