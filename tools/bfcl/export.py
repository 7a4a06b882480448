"""Episodes as result files that BFCL's own `bfcl evaluate` scores, as written.

`bfcl evaluate` reads `<result-dir>/<model>/.../BFCL_v4_multi_turn_<category>_result.json`
(one JSON object per line: `id`, and per turn per agent step the step's calls) and only
for a model name it has registered: the name picks the decoder. Any of its OpenAI
function-calling models decodes `[{name: json_arguments}]`, which is what this writes;
`DEFAULT_MODEL_NAME` is one. The calls are the episode's tool calls as the agent sent
them (what BFCL's executor would run); steps without a call carry nothing its checker
reads and are left out. So are calls seal-graph refused before running them and BFCL
would run differently: arguments that are not a JSON object (BFCL would run the call
with none), hold NaN or Infinity, or name an argument that is not a Python identifier
(BFCL pastes names into the call it evaluates: `{"a')#": 1}` would run `f(a')`).
"""

from __future__ import annotations

import json
import keyword
import shlex
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel

from seal_graph.records import Episode, ToolEvent
from seal_graph.tool_execution import argument_problem
from seal_graph.tools.bfcl import data

#: A model `bfcl evaluate` knows whose decoder reads OpenAI-style function calls.
DEFAULT_MODEL_NAME = "gpt-4o-mini-2024-07-18-FC"
RESULT_DIR, SCORE_DIR = "bfcl_result", "bfcl_score"


class BFCLExport(BaseModel):
    """What was written and the command that scores it."""

    files: list[str]
    command: str
    partial: bool


def exportable(event: ToolEvent) -> bool:
    """Whether BFCL would run the call as seal-graph read it (see the module docstring)."""
    if event.error_kind == "parse_error":  # the server could not read the call
        return False
    arguments = event.arguments
    return argument_problem(event.name, arguments) is None and all(
        name.isidentifier() and not keyword.iskeyword(name)
        for name in arguments  # type: ignore[union-attr]
    )


def turn_steps(episode: Episode) -> list[list[list[dict[str, str]]]]:
    """Per turn, per agent step, the step's calls as `{name: json_arguments}`."""
    steps: dict[tuple[int, int], list[dict[str, str]]] = defaultdict(list)
    for event in episode.tool_events:
        if exportable(event):
            steps[(event.turn, event.step)].append({event.name: json.dumps(event.arguments)})
    return [
        [calls for (turn, _), calls in sorted(steps.items()) if turn == index]
        for index in range(len(episode.turns))
    ]


def export_results(episodes: list[Episode], out_dir: Path, model_name: str) -> BFCLExport:
    """Write the result files under `out_dir/bfcl_result/<model>/multi_turn/` and say
    how to score them (`--partial-eval` when a category has only some of its tasks)."""
    folder = model_name.replace("/", "_")  # as bfcl names its result folders
    target = out_dir / RESULT_DIR / folder / "multi_turn"
    target.mkdir(parents=True, exist_ok=True)
    lines: dict[str, list[str]] = defaultdict(list)
    for episode in sorted(episodes, key=lambda e: int(e.task_id.rsplit("_", 1)[1])):
        row = {"id": episode.task_id, "result": turn_steps(episode)}
        lines[data.category_of(episode.task_id)].append(json.dumps(row))
    files = []
    for category, rows in lines.items():
        path = target / f"BFCL_v4_multi_turn_{category}_result.json"
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")
        files.append(str(path))
    per_category = {
        c: sum(1 for i in data.entries() if data.category_of(i) == c) for c in data.CATEGORIES
    }
    partial = any(len(rows) < per_category[c] for c, rows in lines.items())
    command = evaluate_command(out_dir, model_name, partial)
    return BFCLExport(files=files, command=command, partial=partial)


def evaluate_command(out_dir: Path, model_name: str, partial: bool) -> str:
    """The `bfcl evaluate` command line for an export (run where bfcl-eval is installed
    with its dependencies: its CLI imports every provider's SDK). The OpenAI handler
    builds a client even to score, so it needs a key; scoring calls no API."""
    words = [
        "bfcl", "evaluate", "--model", model_name, "--test-category", "multi_turn",
        "--result-dir", RESULT_DIR, "--score-dir", SCORE_DIR,
        *(["--partial-eval"] if partial else []),
    ]  # fmt: skip
    root = shlex.quote(str(out_dir.resolve()))
    return f"BFCL_PROJECT_ROOT={root} OPENAI_API_KEY=unused {shlex.join(words)}"
