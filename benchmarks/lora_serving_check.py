"""Does a LoRA-enabled server serve the adapter the trainer trained? Per serving dtype.

    .venv/bin/python benchmarks/lora_serving_check.py RUN_DIR [--dtype bfloat16|float32]

Needs a coevolve-dpo run directory (`benchmarks/learning.py --sweep-dpo` makes them): its
policy adapters `step-0..2`, its failure agent's, and its traces. A LoRA-enabled server of
`--dtype` loads each policy adapter in place under the served name, after the failure
agent's, as the coevolve-dpo loop does; after each load the first answer token of
`--prompts` served prompts is compared with the trainer's (float32) under every adapter:
the served policy is right where its gap to the loaded adapter is the smallest and near 0.
The figures behind `serving_dtype`'s float32 for LoRA servers come from this script.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from probe_check import policy_with, served_prompts  # benchmarks/probe_check.py

from seal_graph import DEFAULT_SERVED_NAME, ModelServer, ServerSettings
from seal_graph.training.dpo_loop import FAILURE_NAME
from seal_graph.training.weight_sync import Probe, ProbeCheck, WeightSync, reference_probe

VERSIONS = ("step-0", "step-1", "step-2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16")
    parser.add_argument("--prompts", type=int, default=10)
    args = parser.parse_args()
    base = Path(json.loads((args.run / "config.json").read_text())["model"])
    prompts = served_prompts(args.run, args.prompts, answer_prefix=0)
    trainers = {v: policy_with(base, args.run / "adapters" / v) for v in VERSIONS}
    check = ProbeCheck(tolerance=10.0, answer_tokens=1)
    settings = ServerSettings(
        model=str(base), served_model_name=f"{DEFAULT_SERVED_NAME}-base", dtype=args.dtype
    )
    with ModelServer.start(settings) as server:
        policy = WeightSync(
            server.endpoint.model_copy(update={"model": DEFAULT_SERVED_NAME}), "lora"
        )
        failure = WeightSync(server.endpoint.model_copy(update={"model": FAILURE_NAME}), "lora")
        for loaded in VERSIONS:
            failure.server.load("lora", args.run / "failure-adapters" / loaded)
            policy.server.load("lora", args.run / "adapters" / loaded)
            for version, trainer in trainers.items():
                gaps = [
                    policy.gap(
                        reference_probe(Probe(prompt_token_ids=p, completion_token_ids=[0]),
                                        trainer, check),
                        trainer.completion_logprobs,
                    )[0]
                    for p in prompts
                ]  # fmt: skip
                print(
                    f"{args.dtype}, {loaded} served, trainer with {version}: first-token gap "
                    f"max {max(gaps):.2e}, mean {sum(gaps) / len(gaps):.2e}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
