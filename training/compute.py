"""How the TRL trainers use this machine: precision and activation memory.

TRL's configs default to gradient checkpointing (recompute activations in the backward
pass to save memory). For the bundled 135M model that trade is wrong on CPU: a LoRA
forward+backward of 4 x 850 tokens runs at ~320 tokens/s here without it and about half
that with it, and the activations fit easily. The exception is a DPO round of long pairs
(BFCL's ~10k-token ones): `DPOSettings.checkpoint_above_tokens` turns it on there.
bf16 autocast is used where the CPU has bf16 kernels (1.8x faster measured here);
`precision` in each stage's settings overrides it.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import resource
from pathlib import Path
from typing import Any

import torch


def use_bf16(precision: str) -> bool:
    """bf16 autocast for `precision` ("auto", "bf16", "fp32") on this hardware."""
    if precision != "auto":
        return precision == "bf16"
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def trainer_compute_args(precision: str, gradient_checkpointing: bool = False) -> dict[str, Any]:
    """The device, precision and memory arguments every TRL config here gets."""
    return {
        "use_cpu": not torch.cuda.is_available(),
        "bf16": use_bf16(precision),
        "gradient_checkpointing": gradient_checkpointing,
    }


def release_mixed_precision(trainer: Any) -> None:
    """Undo accelerate's bf16 autocast wrapper on the model's forward after training.

    Under mixed precision accelerate replaces `model.forward` with an autocast version and
    leaves it there; the policy would then compute every later logprob in bf16 (swap
    probes then disagree with the fp32 server by ~0.1-0.2 nats per token, measured).
    """
    trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)


_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak_rss() -> None:
    """Start `peak_rss_mb` afresh, so a step reports its own peak rather than the high-water
    mark of everything the process did before it (model conversion, merges, evaluations).
    Memory freed before it goes back to the system first (glibc keeps freed blocks, a
    merged checkpoint's copy among them, and counts them as resident): what the step
    adds then starts from what the process really holds. Linux resets the peak through
    `/proc/self/clear_refs`; elsewhere it stays since start."""
    return_freed_memory()
    with contextlib.suppress(OSError):
        _CLEAR_REFS.write_text("5")


def return_freed_memory() -> None:
    """Hand memory the process freed back to the system (glibc's `malloc_trim`; a no-op
    where there is no glibc)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def peak_rss_mb() -> float:
    """Peak resident memory since the last `reset_peak_rss` (Linux; elsewhere since the
    process started), in MB: what a step is reported with."""
    try:
        status = _STATUS.read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024
