"""The reliability suite in one command: faults, bad input, load; writes the report.

    .venv/bin/python benchmarks/reliability.py            # everything (~15 min on 2 cores)
    .venv/bin/python benchmarks/reliability.py --fast     # without the slow loop-kill suite

Runs the fault-injection and bad-input tests (pytest, real vLLM server where they need
one) with `SEAL_GRAPH_RELIABILITY_LOG` set, so each records what it injected and what
survived, then the long-run memory benchmark, and writes `docs/results/reliability.md`.
The fast part of the same tests runs in CI with the default test command.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = {
    "tests/test_server_faults.py": "model server killed mid-batch / staying down",
    "tests/test_fault_suite.py": "training loop SIGKILLed at 7 points, resumed",
    "tests/test_train_resume.py": "training loop SIGKILLed mid-iteration, resumed",
    "tests/test_train_loop_real_server.py": "corrupt adapter refused, old weights serve; "
    "no secret in run files",
    "tests/test_fuzz_tool_calls.py": "fuzzed tool calls (hypothesis), BFCL never evals",
    "tests/test_tool_execution.py": "tool errors, timeouts, argument isolation",
    "tests/test_rollout_graph.py": "step limit cuts and labels a looping turn",
    "tests/test_store.py": "trace store: atomic episodes, locked store, full disk",
    "tests/test_store_durability.py": "trace store under repeated kill -9 of the writer",
    "tests/test_cli_errors.py": "bad user input: clear messages, exit 1",
    "tests/test_train_config.py": "invalid config files name the field",
    "tests/test_serving.py": "API key required, never in argv or logs",
    "tests/test_rollout_isolation.py": "concurrent rollouts never share environment state",
}


def run_tests(fast: bool, log: Path, junit: Path) -> int:
    marker = "not slow" if fast else ""
    command = [
        sys.executable,
        "-m",
        "pytest",
        *SUITE,
        "-m",
        marker,
        "-q",
        f"--junitxml={junit}",
        "-p",
        "no:cacheprovider",
    ]
    print("$", " ".join(command), flush=True)
    env = {**os.environ, "SEAL_GRAPH_RELIABILITY_LOG": str(log)}
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode


def run_memory() -> dict:
    command = [sys.executable, str(ROOT / "benchmarks/memory.py"), "--out", "runs/bench-memory"]
    print("$", " ".join(command), flush=True)
    output = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return json.loads(output[-1])["summary"]


def test_results(junit: Path) -> list[dict]:
    results = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[tag]
        results.append(
            {
                "file": case.get("classname", "").replace(".", "/") + ".py",
                "name": case.get("name"),
                "seconds": float(case.get("time", 0)),
                "outcome": outcome,
            }
        )
    return results


def write_report(results: list[dict], records: list[dict], memory: dict, args: str) -> Path:
    passed = sum(r["outcome"] == "passed" for r in results)
    lost = sum(int(r.get("episodes_lost", 0)) for r in records)
    faults = sum(int(r.get("faults_injected", 0)) for r in records)
    cases = sum(
        int(r.get(k, 0))
        for r in records
        for k in ("tool_call_cases", "rollout_cases", "bfcl_injection_cases")
    )
    lines = [
        "# Reliability and security results",
        "",
        f"Command: `.venv/bin/python benchmarks/reliability.py{args}` on "
        f"{time.strftime('%Y-%m-%d')}, {platform.machine()} / {platform.system()}, "
        f"Python {platform.python_version()}, CPU only.",
        "",
        f"**{passed}/{len(results)} tests passed; {faults} faults injected; {cases} fuzz "
        f"cases tried; episodes lost: {lost}.**",
        "",
        "## What each fault test recorded",
        "",
        "| test | numbers |",
        "|---|---|",
    ]
    for record in records:
        numbers = ", ".join(f"{k}={v}" for k, v in record.items() if k != "test")
        lines.append(f"| `{record['test']}` | {numbers} |")
    lines += [
        "",
        "## Memory over a long run",
        "",
        "`benchmarks/memory.py`: kv-calc rollouts through the rollout graph, checkpointer, "
        "tool sessions and trace store, with a scripted model (no server), concurrency 8.",
        "",
        f"- {memory['episodes']} episodes in {memory['seconds']} s, {memory['failures']} failed",
        f"- RSS {memory['rss_at_20pct_mib']} MiB after 20% of the episodes, "
        f"{memory['rss_end_mib']} MiB at the end (peak {memory['rss_peak_mib']} MiB): "
        f"growth {memory['growth_after_20pct_mib']} MiB over the last 80%",
        "",
        "## Tests",
        "",
        "| area | test | result | seconds |",
        "|---|---|---|---|",
    ]
    for r in results:
        area = SUITE.get(r["file"], r["file"])
        name = r["name"].replace("`", "'").replace("|", "\\|").replace("\n", "\\n")
        lines.append(f"| {area} | `{name}` | {r['outcome']} | {r['seconds']:.1f} |")
    path = ROOT / "docs/results/reliability.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="Skip the slow loop-kill suite.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log, junit = Path(tmp) / "records.jsonl", Path(tmp) / "junit.xml"
        code = run_tests(args.fast, log, junit)
        records = (
            [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        )
        results = test_results(junit)
    memory = run_memory()
    path = write_report(results, records, memory, " --fast" if args.fast else "")
    print(f"wrote {path}")
    sys.exit(code)


if __name__ == "__main__":
    main()
