"""A tiny environment on which the untrained bundled model gets mixed rewards at T=1, so
GRPO has signal without a warm start (for real-server loop tests)."""

from __future__ import annotations

from seal_graph.environment import Task
from seal_graph.records import Verdict
from seal_graph.registry import register_environment
from seal_graph.tools.langchain_env import from_langchain_tools


def _says_yes(task, state, episode) -> Verdict:
    answer = next(
        (m["content"] for m in reversed(episode.messages) if m["role"] == "assistant"), ""
    )
    success = "yes" in (answer or "").lower()
    return Verdict(
        reward=float(success), success=success, turn_evidence=[{"turn": 0, "pass": success}]
    )


def yes_no_env() -> str:
    tasks = [
        Task(id=f"yn_{i}", turns=[question])
        for i, question in enumerate(
            [
                "Is water wet? Answer yes or no.",
                "Is the sky blue? Answer yes or no.",
                "Is fire hot? Answer yes or no.",
                "Is snow cold? Answer yes or no.",
            ]
        )
    ]
    env = from_langchain_tools(
        "yes-no", tasks={"train": tasks, "test": tasks}, tools=[], verify=_says_yes
    )
    return register_environment(env)


def make_env():
    """`loop_envs:make_env` for a training run in another process."""
    from seal_graph.registry import get_environment

    return get_environment(yes_no_env())
