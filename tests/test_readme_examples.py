"""The environment examples of the README and the docs run as written (docs must not rot)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from seal_graph.diagnosis import diagnose_episode
from seal_graph.records import Episode, ToolEvent, TurnRecord
from seal_graph.reference import replay_calls

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CONTRACT = (ROOT / "docs/environments.md").read_text()


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


def test_declared_turn_expectations_example() -> None:
    """The contract page's question-style task: its verifier's evidence gives the tags."""
    blocks = re.findall(r"```python\n(.*?)```", CONTRACT, flags=re.S)
    (example,) = [b for b in blocks if "expects_calls=False" in b]
    namespace: dict = {}
    exec(compile(example, "docs/environments.md", "exec"), namespace)
    task, verify = namespace["task"], namespace["verify"]
    lookup = ToolEvent(
        turn=0, step=0, call_id="c", name="lookup", arguments={}, status="ok", output="7"
    )
    for events, tag in (([lookup], "spurious_tool_call"), ([], "correct_abstention")):
        episode = Episode(
            episode_id="e",
            run_id="r",
            env="e",
            task_id="q0",
            sample_index=0,
            messages=[{"role": "assistant", "content": "Ann has id 7."}],
            tool_events=events,
            turns=[TurnRecord(index=i, user_message=t) for i, t in enumerate(task.turns)],
        )
        episode = episode.with_verdict(verify(task, None, episode))
        assert diagnose_episode(episode, task)[0].tag == tag
