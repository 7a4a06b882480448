"""The loop's warm start in a process of its own, so the trainer keeps none of its memory.

Measured (AVX512-BF16 EPYC, the cpu preset): a process that has run the 23-step SFT warm
start holds ~1.1 GB more than before it, with no tensor left alive (the training
libraries' pages and allocations); the GRPO steps after it then peaked at 4.1-4.3 GB
against 3.1 GB without it (`docs/results/performance.md`). A spawned process trains the
adapter on the rows the loop built (so an environment registered only in the loop's
process still works), writes it, and exits; the loop loads it into its policy. The
price is the child's imports, ~10 s here.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seal_graph.training.settings import LoraSettings, WarmStartSettings


@dataclass(frozen=True)
class WarmStartJob:
    """What the spawned process needs: the base weights and adapter shape, the rows
    (`input_ids`, `completion_mask`), the SFT settings, where to log and write."""

    base_dir: Path
    lora: LoraSettings
    rows: list[dict[str, Any]]
    settings: WarmStartSettings
    run_dir: Path
    adapter: Path


def warm_start_apart(job: WarmStartJob) -> dict[str, float]:
    """SFT of a fresh adapter on the job's rows in a spawned process, written to
    `job.adapter`; the trainer's metrics."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(_train, job).result()


def _train(job: WarmStartJob) -> dict[str, float]:
    from datasets import Dataset

    from seal_graph.training.policy import Policy
    from seal_graph.training.run_output import send_library_output_to
    from seal_graph.training.sft import warm_start

    send_library_output_to(job.run_dir)  # the child's library output into the run's log too
    policy = Policy(job.base_dir, job.lora)
    metrics = warm_start(
        policy.model,
        policy.tokenizer,
        Dataset.from_list(job.rows),
        job.settings,
        job.run_dir / "sft",
    )
    policy.save_adapter(job.adapter)
    return metrics
