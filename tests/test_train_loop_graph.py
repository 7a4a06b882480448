"""Wiring of the whole train-loop graph, with a scripted fake model and a fake trainer.

No model server and no torch training: the rollouts' model is the scripted fake chat
model (`fake_models.py`), and the algorithm, policy and weight sync are stand-ins that
record what the graph asked of them. What is checked is the loop itself: every stage
runs each iteration in order, the algorithm is reached only through its interface, the
progress a resume needs is in the checkpointed state, and the report is written.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fake_models import ScriptedToolModel
from langgraph.checkpoint.memory import InMemorySaver
from loop_envs import yes_no_env

from seal_graph.graphs.train_loop import LoopContext, builder
from seal_graph.store import TraceStore
from seal_graph.training.algorithms import Algorithm, TrainResult
from seal_graph.training.config import load_config
from seal_graph.training.replicas import Replica, Replicas
from seal_graph.training.resources import LoopRun
from seal_graph.training.weight_sync import Probe, ProbeCheck, SwapReport

PROBE = Probe(prompt_token_ids=[1, 2, 3], completion_token_ids=[4, 5])


class FakeTokenizer:
    def apply_chat_template(self, messages: list, **kwargs: Any) -> list[int]:
        return [1, 2, 3]


class FakePolicy:
    """Stands in for base model + adapter: versions and files, no tensors."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir, self.version, self.tokenizer = base_dir, 0, FakeTokenizer()

    def save_adapter(self, target: Path) -> Path:
        target.mkdir(parents=True, exist_ok=True)
        return target

    save_merged = save_adapter

    def greedy(self, prompt: list[int], max_new_tokens: int) -> list[int]:
        return [4, 5]

    def completion_logprobs(self, prompt: list[int], completion: list[int]) -> list[float]:
        return [-0.5 - 0.1 * self.version] * len(completion)

    def greedy_answer(
        self, prompt: list[int], max_new_tokens: int, k: int
    ) -> tuple[list[int], list[float], list[int], list[list[float]]]:
        answer = self.greedy(prompt, max_new_tokens)
        return answer, self.completion_logprobs(prompt, answer), [], []


class FakeSync:
    """Stands in for the HTTP weight sync: records what it was asked to serve."""

    def __init__(self) -> None:
        self.current: Path | None = None
        self.swapped: list[str] = []

    endpoint = SimpleNamespace(base_url="fake")
    check = ProbeCheck(tolerance=0.02)  # answer tokens only (no runners-up)
    tolerance = check.tolerance

    def gap(self, probe: Probe, score) -> tuple[float, float]:
        return 0.0, 0.0

    def swap(self, weights: Path, version: str, probe: Probe, score) -> SwapReport:
        self.current = weights
        self.swapped.append(version)
        return SwapReport(ok=True, method="full", version=version, seconds=0.0)

    def restore(self) -> None: ...

    def close(self) -> None: ...


class FakeTrainer(Algorithm):
    """One 'optimiser step' per iteration that had a labelled batch."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self.calls: list[tuple[str, int]] = []

    def initial_state(self) -> dict[str, Any]:
        return {"steps": 0}

    def rollout(self, run, iteration, interface, state) -> dict[str, Any]:
        self.calls.append(("rollout", iteration))
        return {}

    def train(self, run, iteration, pairs, state) -> TrainResult:
        self.calls.append(("train", iteration))
        assert pairs and all(diagnoses for _, diagnoses in pairs)  # diagnose ran first
        run.policy.version += 1
        return TrainResult(
            metrics={"stepped": True, "samples": len(pairs)},
            stepped=True,
            probe=PROBE,
            state={"steps": state["steps"] + 1},
        )

    def swap(self, run, state, probe):
        self.calls.append(("swap", state["steps"]))
        assert probe == PROBE  # the probe of the trained batch, from the checkpointed state
        return None, {}

    def report_sections(self, history) -> list[str]:
        return ["", "## Fake trainer", f"{len(history)} iterations"]


class FakeReplicas(Replicas):
    """One fake server, the scripted chat model: rollouts go straight to it (there is no
    policy card to read)."""

    def __init__(self, sync: FakeSync, model: ScriptedToolModel) -> None:
        super().__init__([Replica(sync)])
        self.model = model

    def endpoints(self) -> Any:
        return self.model  # rollouts accept any LangChain chat model

    def agree(self) -> list[str]:
        return ["fake"]


def test_whole_loop_wiring_with_fake_model_and_fake_trainer(tmp_path: Path) -> None:
    config = load_config(
        None,
        "cpu",
        env=yes_no_env(),
        iterations=2,
        rollout={"tasks_per_iteration": 2, "group_size": 2, "concurrency": 1},
        eval={"every": 1, "limit": 2, "samples": 2, "final_splits": ["test"]},
        warm_start={"epochs": 0},
    )
    model = ScriptedToolModel(script=itertools.cycle(["yes", "no", "no"]))
    algorithm = FakeTrainer(config)
    sync = FakeSync()
    run = LoopRun(
        run_dir=tmp_path,
        run_id="wired",
        config=config,
        replicas=FakeReplicas(sync, model),
        store=TraceStore(tmp_path / "traces.sqlite"),
        policy=FakePolicy(tmp_path / "base"),
        algorithm=algorithm,
    )
    graph = builder.compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "wired"}}
    try:
        output = graph.invoke({"run_dir": str(tmp_path)}, thread, context=LoopContext(run=run))
    finally:
        run.close()

    history = output["history"]
    assert [r["iteration"] for r in history] == [1, 2]
    for record in history:
        assert {"rollout", "diagnose", "evolve", "train", "swap", "evaluate"} <= set(record)
        assert record["rollout"]["episodes"] == 4 and record["evaluate"]["episodes"] == 2
        assert record["evaluate"]["sampled_success"] is not None
    assert algorithm.calls == [
        ("rollout", 0), ("train", 0), ("swap", 1), ("rollout", 1), ("train", 1), ("swap", 2)
    ]  # fmt: skip
    assert sync.swapped == ["step-1", "step-2"]
    final = history[-1]["evaluate"]  # greedy and sampled, each with an interval over tasks
    assert set(final["per_task"]) == set(final["sampled_per_task"]) and len(final["per_task"]) == 2
    for success, (low, high) in (
        (final["success"], final["ci"]),
        (final["sampled_success"], final["sampled_ci"]),
    ):
        assert 0.0 <= low <= success <= high <= 1.0
    assert set(final["splits"]) == {"test"} and final["splits"]["test"]["ci"] is not None
    # a stage's wall time holds all it did: the final evaluation's extra split included
    assert final["wall_seconds"] >= final["seconds"] + final["splits"]["test"]["seconds"]
    for record in history:
        assert record["swap"]["wall_seconds"] >= record["swap"]["seconds"]
    state = graph.get_state(thread).values
    assert (state["policy_version"], state["served_version"]) == (2, 2)
    assert state["algorithm"] == {"steps": 2} and state["probe"] == PROBE.model_dump()
    report = Path(output["report_path"]).read_text()
    assert "## Fake trainer" in report and "2 iterations" in report
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 2
