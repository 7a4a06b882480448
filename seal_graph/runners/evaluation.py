"""Evaluation: greedy rollouts on the base interface, a per-category success table, a
results file, and an export in the file format BFCL's own `bfcl evaluate` scores."""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from itertools import chain, zip_longest
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from rich.table import Table

from seal_graph import registry
from seal_graph.abstention import abstention_rates
from seal_graph.environment import Environment, Task
from seal_graph.records import Episode
from seal_graph.runners.rollouts import RolloutBatchReport, run_rollouts
from seal_graph.serving import ModelEndpoint
from seal_graph.settings import RolloutSettings
from seal_graph.stats import bootstrap_ci
from seal_graph.store import TraceStore


class EvalSummary(BaseModel):
    """Success per category and where the time went."""

    env: str
    split: str
    model: str
    per_category: dict[str, dict[str, Any]] = Field(
        description="Greedy: per category, successes, tasks, accuracy (%) and its 95% "
        "interval over tasks (`ci`, %)."
    )
    overall: float
    overall_ci: tuple[float, float] | None = None
    sampled: dict[str, dict[str, Any]] | None = Field(
        default=None,
        description="With samples: the same table for sampled episodes (a task's success "
        "is the share of its samples that succeed), `all` included.",
    )
    abstention: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Greedy, per category: which way the agent leans "
        "(`seal_graph.abstention`: call rate on turns that need a call, no-call rate on "
        "abstention turns, replies naming what is missing).",
    )
    samples: int = Field(default=0, description="Sampled episodes per task (0 = none).")
    temperature: float | None = Field(default=None, description="Temperature of the samples.")
    episodes: int = Field(description="Every episode run: greedy and sampled.")
    wall_seconds: float
    rollouts_per_second: float
    model_wait_share: float
    results_dir: str
    bfcl_command: str | None = None
    """BFCL: the `bfcl evaluate` command that scores the exported results."""


def category(task: Task) -> str:
    return str(task.metadata.get("category", "all"))


def select_tasks(
    env: Environment, split: str, categories: list[str] | None, limit: int | None
) -> list[Task]:
    """Tasks of a split; with a limit, taken round-robin across categories."""
    tasks = [t for t in env.tasks(split) if not categories or category(t) in categories]
    by_category: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        by_category[category(task)].append(task)
    interleaved = [t for t in chain.from_iterable(zip_longest(*by_category.values())) if t]
    return interleaved[:limit] if limit else interleaved


def _percent(ci: tuple[float, float] | None) -> list[float] | None:
    return [100.0 * v for v in ci] if ci else None


def summarize(
    episodes: list[Episode], tasks: list[Task]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Per category: successes, tasks, accuracy (%) and its interval over tasks (%; a
    task's episodes averaged first); and all of them together: accuracy and interval."""
    categories = {t.id: category(t) for t in tasks}
    by_category: dict[str, list[Episode]] = defaultdict(list)
    for episode in episodes:
        by_category[categories[episode.task_id]].append(episode)
    table = {}
    for name, members in sorted(by_category.items()):
        result = outcomes(members)
        table[name] = {
            "success": sum(result["per_task"].values()),
            "tasks": len(result["per_task"]),
            "accuracy": 100.0 * result["success"],
            "ci": _percent(result["ci"]),
        }
    whole = outcomes(episodes)
    return table, {"accuracy": 100.0 * whole["success"], "ci": _percent(whole["ci"])}


def outcomes(episodes: list[Episode]) -> dict[str, Any]:
    """Success over tasks (a task's episodes averaged first), its 95% bootstrap interval
    over tasks, and the success of every task (so two runs compare task by task)."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for episode in episodes:
        by_task[episode.task_id].append(float(episode.success))
    per_task = {task: statistics.fmean(values) for task, values in sorted(by_task.items())}
    values = list(per_task.values())
    return {
        "success": statistics.fmean(values) if values else 0.0,
        "episodes": len(episodes),
        "ci": bootstrap_ci(values) if values else None,
        "per_task": per_task,
    }


def mixed_groups(
    episodes: list[Episode],
    category_of: Callable[[str], str],
    reward_of: Callable[[Episode], float] = lambda episode: episode.reward,
) -> dict[str, float]:
    """Per category and over all (`all`), the share of tasks whose episodes got different
    rewards (`reward_of`): the only GRPO groups with a gradient."""
    rewards: dict[str, set[float]] = defaultdict(set)
    for episode in episodes:
        rewards[episode.task_id].add(reward_of(episode))
    mixed: dict[str, list[bool]] = defaultdict(list)
    for task_id, values in rewards.items():
        for name in (category_of(task_id), "all"):
            mixed[name].append(len(values) > 1)
    return {name: statistics.fmean(flags) for name, flags in sorted(mixed.items())}


def _cell(accuracy: float, ci: Any, detail: str = "") -> str:
    interval = f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else ""
    return f"{accuracy:.2f}%{interval}{detail}"


def _leans(rates: dict[str, Any]) -> str:
    def pct(key: str) -> str:
        return "—" if rates.get(key) is None else f"{100 * rates[key]:.0f}%"

    return f"{pct('call_rate')} / {pct('no_call_rate')}"


def render_table(summary: EvalSummary) -> Table:
    """BFCL's table: overall accuracy first, then one column per category the
    environment's tasks declare (`Task.metadata["category"]`), each with its 95% interval
    over tasks; a row for greedy decoding, one for which way it leans (the call rate on
    turns that need a call / the no-call rate on abstention turns) and, with samples,
    one for sampled episodes."""
    table = Table(title=f"{summary.env} / {summary.split} — {summary.model}")
    table.add_column("")
    table.add_column("Overall Acc [95% interval]", justify="right")
    prefix = "Multi Turn " if summary.env.startswith("bfcl") else ""
    for name in summary.per_category:
        table.add_column(f"{prefix}{name.replace('_', ' ').title()}", justify="right")
    table.add_row(
        "greedy",
        _cell(summary.overall, summary.overall_ci),
        *(
            _cell(c["accuracy"], c.get("ci"), f" ({c['success']:.0f}/{c['tasks']:.0f})")
            for c in summary.per_category.values()
        ),
    )
    if summary.abstention:
        table.add_row(
            "calls / no-calls",
            _leans(summary.abstention.get("all", {})),
            *(_leans(summary.abstention.get(name, {})) for name in summary.per_category),
        )
    if summary.sampled:
        overall = summary.sampled["all"]
        table.add_row(
            f"sampled ({summary.samples} at T={summary.temperature:g})",
            _cell(overall["accuracy"], overall["ci"]),
            *(
                _cell(summary.sampled[name]["accuracy"], summary.sampled[name]["ci"])
                for name in summary.per_category
            ),
        )
    return table


async def evaluate(
    env_name: str | Environment,
    endpoint: ModelEndpoint,
    *,
    split: str,
    out_dir: Path,
    categories: list[str] | None = None,
    limit: int | None = None,
    settings: RolloutSettings | None = None,
    bfcl_model_name: str | None = None,
    samples: int = 0,
) -> EvalSummary:
    """Greedy rollouts of a split on the base interface (`settings` give the token and
    step limits and the concurrency; temperature 0 and one episode per task always, each
    ended at its first failed turn where the environment can tell),
    and with `samples` > 0 that many episodes per task at `settings.temperature`.
    BFCL runs are also written as `bfcl evaluate` result files under `bfcl_model_name`
    (a model name BFCL has registered; see `seal_graph.tools.bfcl.export`)."""
    env = registry.resolve_environment(env_name)  # a name, or an object from Python
    tasks = select_tasks(env, split, categories, limit)
    out_dir.mkdir(parents=True, exist_ok=True)
    store = TraceStore(out_dir / "traces.sqlite")
    run_id = f"eval-{env.name}-{split}"
    report: RolloutBatchReport = await run_rollouts(
        env,
        endpoint,
        [t.id for t in tasks],
        store=store,
        run_id=run_id,
        settings=(settings or RolloutSettings()).greedy(),
        mode="eval",  # the base interface, enforced by the rollout graph
        keep_episodes=False,  # read back from the store below
    )
    episodes = store.episodes(run_id)  # includes episodes of an earlier, interrupted run
    sampled, sampled_count = None, 0
    if samples:
        sampling = (settings or RolloutSettings()).model_copy(
            update={"group_size": samples, "stop_at_failed_turn": True}
        )
        sampled_report = await run_rollouts(
            env,
            endpoint,
            [t.id for t in tasks],
            store=store,
            run_id=f"{run_id}-sampled",
            settings=sampling,
            mode="eval",
            keep_episodes=False,
        )
        report.wall_seconds += sampled_report.wall_seconds
        sampled_episodes = store.episodes(f"{run_id}-sampled")
        sampled_count = len(sampled_episodes)
        sampled, together = summarize(sampled_episodes, tasks)
        sampled["all"] = together
    store.close()
    per_category, overall = summarize(episodes, tasks)
    busy = report.busy_seconds
    summary = EvalSummary(
        env=env.name,
        split=split,
        model=endpoint.model,
        per_category=per_category,
        overall=overall["accuracy"],
        overall_ci=overall["ci"],
        abstention=abstention_rates(episodes, {t.id: category(t) for t in tasks}.__getitem__),
        sampled=sampled,
        samples=samples,
        temperature=(settings or RolloutSettings()).temperature if samples else None,
        episodes=len(episodes) + sampled_count,
        wall_seconds=report.wall_seconds,
        rollouts_per_second=len(report.finished) / max(report.wall_seconds, 1e-9),
        model_wait_share=report.model_seconds / busy if busy else 0.0,
        results_dir=str(out_dir),
    )
    if env.name.startswith("bfcl"):
        from seal_graph.tools.bfcl.export import DEFAULT_MODEL_NAME, export_results

        export = export_results(episodes, out_dir, bfcl_model_name or DEFAULT_MODEL_NAME)
        summary.bfcl_command = export.command
    results = {
        "summary": summary.model_dump(),
        "generated_at": time.time(),
        "tasks": [
            {
                "task_id": e.task_id,
                "success": e.success,
                "reward": e.reward,
                "turn_tags": [
                    t.evidence.tag if t.evidence.tag is not None else t.evidence.passed
                    for t in e.turns
                ],
            }
            for e in episodes
        ],
    }
    (out_dir / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    return summary
