"""What an outsider's large body costs the open paths of a server seal-graph starts.

    .venv/bin/python benchmarks/open_paths.py      # ~1 min; writes docs/results/open_paths.json

`/health` and `/ping` answer without the key, so anyone who reaches the port can send
them a body. Neither reads it (`serving.guards`): this sends 50 MB of `[{},{},...]` to
`/ping` without a key, and measures how long the answer took, how much the server's
processes grew (RSS, summed over its process group) and how long a `/health` poll sent
meanwhile waited. Targets (issue 49): < 0.2 s and < 50 MB.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import httpx

from seal_graph import ModelServer, ServerSettings
from seal_graph.serving.launch import has_bf16_kernels

ROOT = Path(__file__).resolve().parent.parent
BODY_MB = 50


def group_rss_mb(pid: int) -> float:
    """Resident memory of a process and every process in its group (vLLM's workers)."""
    group = os.getpgid(pid)
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != group:
                continue
            fields = (entry / "status").read_text().split("VmRSS:")
            total += int(fields[1].split()[0]) if len(fields) > 1 else 0
        except (OSError, ProcessLookupError, ValueError):
            continue
    return total / 1024


def main() -> None:
    body = b"[" + b",".join([b"{}"] * (BODY_MB * 1024 * 1024 // 3)) + b"]"
    with ModelServer.start(ServerSettings(port=0, dtype="float32")) as server:
        root = server.endpoint.server_root
        before = group_rss_mb(server.process.pid)
        waits: list[float] = []

        def poll_health() -> None:
            began = time.perf_counter()
            httpx.get(f"{root}/health", timeout=60)
            waits.append(time.perf_counter() - began)

        poller = threading.Thread(target=poll_health)
        began = time.perf_counter()
        poller.start()
        answer = httpx.post(
            f"{root}/ping", content=body, headers={"Content-Type": "application/json"}, timeout=120
        )
        seconds = time.perf_counter() - began
        poller.join()
        after = group_rss_mb(server.process.pid)
    result = {
        "measured": time.strftime("%Y-%m-%d %H:%M"),
        "cpu_bf16_kernels": has_bf16_kernels(),
        "body_mb": round(len(body) / 1e6, 1),
        "status": answer.status_code,
        "seconds": round(seconds, 3),
        "rss_growth_mb": round(after - before, 1),
        "health_wait_s": round(waits[0], 3),
        "targets": {"seconds": 0.2, "rss_growth_mb": 50},
    }
    out = ROOT / "docs" / "results" / "open_paths.json"
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
