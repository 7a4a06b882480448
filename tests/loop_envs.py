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


def _yes_per_turn(task, state, episode) -> Verdict:
    answers: list[str] = []
    for message in episode.messages:
        if message["role"] == "user":
            answers.append("")
        elif message["role"] == "assistant" and answers:
            answers[-1] = message.get("content") or ""
    evidence = [{"turn": i, "pass": "yes" in a.lower()} for i, a in enumerate(answers)]
    success = bool(evidence) and all(e["pass"] for e in evidence)
    return Verdict(reward=float(success), success=success, turn_evidence=evidence)


def two_turn_env() -> str:
    """Two yes/no questions per task: failures differ in partial progress (0 or 0.5)."""
    questions = [
        ("Is water wet? Answer yes or no.", "Is fire hot? Answer yes or no."),
        ("Is the sky blue? Answer yes or no.", "Is snow cold? Answer yes or no."),
        ("Is ice cold? Answer yes or no.", "Is the sun bright? Answer yes or no."),
    ]
    tasks = [Task(id=f"yn2_{i}", turns=list(pair)) for i, pair in enumerate(questions)]
    env = from_langchain_tools(
        "yes-no-2", tasks={"train": tasks, "test": tasks}, tools=[], verify=_yes_per_turn
    )
    return register_environment(env)
