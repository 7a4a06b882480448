"""User environments by import path: loadable from the folder they live in, and
reachable by their own name afterwards (episodes, graphs and the loop use the name)."""

from __future__ import annotations

import sys

from seal_graph.registry import get_environment, task_of

MODULE = """
from seal_graph.environment import Task
from seal_graph.records import Verdict
from seal_graph.tools.langchain_env import from_langchain_tools

def make_env():
    tasks = [Task(id="hello_0", turns=["Say hello."])]
    return from_langchain_tools(
        "hello-env", tasks={"train": tasks, "test": tasks}, tools=[],
        verify=lambda task, state, episode: Verdict(reward=1.0, success=True),
    )
"""


def test_a_factory_in_the_current_folder_loads_and_is_known_by_its_name(
    tmp_path, monkeypatch
) -> None:
    (tmp_path / "hello_env_module.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the folder is added for this test only
    env = get_environment("hello_env_module:make_env")
    assert env.name == "hello-env"
    assert get_environment("hello-env") is env  # what the loop and the graphs look up

    class Stub:
        env, task_id = "hello-env", "hello_0"

    assert task_of(Stub()).turns == ["Say hello."]
