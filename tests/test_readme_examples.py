"""The README's environment example runs as written (docs must not rot)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from seal_graph.reference import replay_calls

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_from_langchain_tools_example() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    (example,) = [b for b in blocks if "from_langchain_tools(" in b]
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)
    env = namespace["env"]
    task = env.tasks("train")[0]
    good = [[{"name": "set_value", "args": {"key": "a", "value": 3}}]]
    bad = [[{"name": "set_value", "args": {"key": "a", "value": 4}}]]
    assert asyncio.run(replay_calls(env, task, good))[1].reward == 1.0
    assert asyncio.run(replay_calls(env, task, bad))[1].reward == 0.0
