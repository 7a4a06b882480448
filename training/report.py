"""The end-of-run report: Markdown a person would want to read, with PNG plots."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on a server
import matplotlib.pyplot as plt

from seal_graph import registry
from seal_graph.interface import InterfaceVersion
from seal_graph.stats import paired_difference_ci
from seal_graph.training.metrics import (
    DPORound,
    EvaluateMetrics,
    IterationMetrics,
    NegativeStatistics,
)
from seal_graph.training.resources import LoopRun

STAGES = ("rollout", "diagnose", "evolve", "train", "swap", "evaluate")


def _save(fig: Any, ax: Any, path: Path, legend_size: int, **axes: Any) -> None:
    """Label the axes, add the legend, write the PNG and free the figure."""
    ax.set(**axes)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_success(
    history: list[IterationMetrics], baseline: dict[str, Any], warm: dict[str, Any], path: Path
) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    its = [r.iteration for r in history]
    ax.plot(
        its,
        [r.rollout.train_success for r in history],
        "o-",
        label="training rollouts (adapted interface, sampled)",
    )
    evals = [(0, baseline.get("success"))] if baseline else []
    if warm:
        evals.append((0.5, warm.get("eval_success")))
    evals += [(r.iteration, r.evaluate.success) for r in history if r.evaluate]
    if evals:
        ax.plot(*zip(*evals, strict=True), "s--", label="evaluation (base interface, T=0)")
    _save(
        fig,
        ax,
        path,
        8,
        xlabel="iteration (0 = before training)",
        ylabel="success rate",
        ylim=(-0.02, 1.02),
        title="Success over iterations",
    )


def plot_labels(history: list[IterationMetrics], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = sorted({k for r in history for k in r.diagnose.label_prevalence})
    its = [r.iteration for r in history]
    for label in labels:
        ax.plot(
            its,
            [r.diagnose.label_prevalence.get(label, 0.0) for r in history],
            "o-",
            label=label,
        )
    _save(
        fig,
        ax,
        path,
        7,
        xlabel="iteration",
        ylabel="share of labelled turns",
        ylim=(-0.02, 1.02),
        title="Turn-label prevalence",
    )


def plot_advantages(history: list[IterationMetrics], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    its = [r.iteration for r in history]
    ax.plot(its, [r.rollout.train_reward for r in history], "o-", label="mean reward")
    ax.plot(
        its,
        [r.train.mean_abs_advantage for r in history],
        "s-",
        label="mean |advantage|",
    )
    ax.plot(
        its,
        [r.train.mean_weight for r in history],
        "^-",
        label="mean diagnosis weight",
    )
    ax.plot(
        its,
        [r.train.zero_signal_groups / max(r.train.groups, 1) for r in history],
        "x--",
        label="share of zero-signal groups",
    )
    _save(fig, ax, path, 8, xlabel="iteration", title="Reward and advantage statistics")


def _pct(value: Any) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def _interval(ci: tuple[float, float] | None) -> str:
    return "" if ci is None else f" (95% interval {_pct(ci[0])}-{_pct(ci[1])})"


def _num(value: float | None, default: float) -> float:
    return default if value is None else value


def training_step_section(history: list[IterationMetrics]) -> list[str]:
    """Per iteration: what the GRPO step forwarded, how fast, and how far the server's
    logprobs were from the trainer's (the truncated importance weights correct for it)."""
    lines = [
        "",
        "## Training steps",
        "",
        "Forwarded / episode tokens: training tokens forwarded (with padding and any "
        "per-call fallback) per token of the trained episodes themselves (1.0 = each "
        "episode once, nothing repeated). Mismatch: |served - trainer| logprob per agent "
        "token before the step; truncated: share of tokens whose importance weight hit "
        "the cap.",
        "",
        "| it | episodes | split into calls | forwarded / episode tokens | padding | "
        "tokens/s | optimiser steps | mismatch mean | mismatch max | truncated | peak RSS |",
        "|" + "---|" * 11,
    ]
    for r in history:
        t = r.train.model_dump()
        if not t.get("episode_tokens"):
            continue
        lines.append(
            f"| {r.iteration} | {t['episodes']:.0f} | "
            f"{t.get('episodes_split_into_calls', 0)} | "
            f"{t['forwarded_tokens'] / t['episode_tokens']:.2f} | {t['padding_share']:.1%} | "
            f"{t['tokens_per_second']:.0f} | {t['optimizer_steps']:.0f} | "
            f"{t.get('mismatch_mean', float('nan')):.4f} | "
            f"{t.get('mismatch_max', float('nan')):.3f} | "
            f"{t.get('tis_truncated_share', 0):.1%} | {t['peak_rss_mb'] / 1024:.1f} GB |"
        )
    return lines


ABSTENTION_TAGS = ("spurious_tool_call", "correct_abstention")
"""The tags of turns whose right response calls nothing (rho 2.0 and 1.8)."""


def diagnosis_weight_section(history: list[IterationMetrics]) -> list[str]:
    """Per iteration, rho(z) for every tag the run's batches carried (the paper's per-turn
    tags; a turn without one is keyed by its label), how often the abstention tags
    occurred and how many trajectories the weights moved (diagnosis-weighted GRPO only)."""
    weighted = [r for r in history if r.train.rho]
    if not weighted:
        return []
    seen = sorted({k for r in history for k in r.diagnose.tag_counts})  # trusted turns only
    lines = [
        "",
        "## Diagnosis weights",
        "",
        "rho per tag as each step weighted advantages with it (1 = no reweighting; tags "
        "the weighting table leaves out start at 1); the share of tagged turns that were "
        "abstention turns (spurious_tool_call + correct_abstention), of trajectories "
        "whose weight differs from 1 by 0.2 or more, and of the advantage mass sum|A| the "
        "weights moved (sum|A~ - A| / sum|A|).",
        "",
        "| it | " + " | ".join(seen) + " | abstention tags | trajectories reweighted "
        "| advantage mass moved |",
        "|" + "---|" * (len(seen) + 4),
    ]
    for r in weighted:
        values = " | ".join(f"{r.train.rho.get(k, 1.0):.3f}" for k in seen)
        tagged = sum(r.diagnose.tag_counts.values())
        abstentions = sum(r.diagnose.tag_counts.get(t, 0) for t in ABSTENTION_TAGS)
        share = _pct(abstentions / tagged) if tagged else "—"
        moved = _pct(r.train.moved_advantage.get("all"))
        lines.append(
            f"| {r.iteration} | {values} | {share} | {_pct(r.train.reweighted_share)} | {moved} |"
        )
    return lines


def label_section(history: list[IterationMetrics]) -> list[str]:
    """Every turn label the diagnosis gave, per iteration: the raw labels (such as
    `recovery_failure`) beside the per-turn tags the weights act on."""
    labels = sorted({k for r in history for k in r.diagnose.label_counts})
    if not labels:
        return []
    return [
        "",
        "## Turn labels",
        "",
        "Turns per diagnosis label in each training batch (a turn has one label; the "
        "weights act on its per-turn tag where the verifier gives one: Diagnosis weights).",
        "",
        "| it | " + " | ".join(labels) + " |",
        "|" + "---|" * (len(labels) + 1),
        *(
            f"| {r.iteration} | "
            + " | ".join(str(r.diagnose.label_counts.get(k, 0)) for k in labels)
            + " |"
            for r in history
        ),
    ]


def abstention_section(warm: dict[str, Any], history: list[IterationMetrics]) -> list[str]:
    """Which way the agent leans, per category: in the greedy evaluations (warm start and
    the last), and per iteration in the training batch, with the share of groups GRPO
    could learn from. Success hides this: 0% on miss_param may mean a call on every turn
    or on none."""
    evaluations = [("warm start", warm.get("eval_abstention") or {})]
    evaluations += [
        (f"after it {r.iteration}", r.evaluate.abstention)
        for r in history
        if r.evaluate is not None and r.evaluate.abstention
    ]
    if not any(rates for _, rates in evaluations) and not any(
        r.rollout.abstention for r in history
    ):
        return []
    lines = [
        "",
        "## Calls and abstentions",
        "",
        "Call rate: on turns that need a call, the share with one. No-call rate: on "
        "abstention turns (the right response asks for what is missing or says no tool "
        "can), the share with none. Names missing: of those turns' replies, the share that "
        "name what is missing. Greedy evaluations:",
        "",
        "| evaluation | category | call rate | no-call rate | names missing | turns |",
        "|---|---|---|---|---|---|",
    ]
    for name, rates in evaluations:
        for category, row in rates.items():
            lines.append(
                f"| {name} | {category} | {_pct(row.get('call_rate'))} | "
                f"{_pct(row.get('no_call_rate'))} | {_pct(row.get('names_missing_rate'))} | "
                f"{row.get('call_turns', 0)} + {row.get('abstention_turns', 0)} |"
            )
    lines += [
        "",
        "Training batches (sampled), with the share of task groups whose rewards differ "
        "(the only ones GRPO learns from):",
        "",
        "| it | category | call rate | no-call rate | names missing | mixed groups |",
        "|---|---|---|---|---|---|",
    ]
    for r in history:
        for category, row in r.rollout.abstention.items():
            lines.append(
                f"| {r.iteration} | {category} | {_pct(row.get('call_rate'))} | "
                f"{_pct(row.get('no_call_rate'))} | {_pct(row.get('names_missing_rate'))} | "
                f"{_pct(r.rollout.mixed_groups.get(category))} |"
            )
    return lines


def hard_negative_section(history: list[IterationMetrics]) -> list[str]:
    """Per iteration: how close the negatives came to success, and the DPO rounds."""
    lines = [
        "",
        "## Hard negatives",
        "",
        "Partial progress = share of user turns the verifier passed (1 = success). "
        "Near-success: progress >= 0.5. DPO margin: chosen minus rejected implicit reward "
        "on the last logged step.",
        "",
        "| it | negatives | mean progress | best | near-success | target pairs | "
        "target loss | target margin | failure-agent success | its failures' progress | "
        "failure-agent pairs |",
        "|" + "---|" * 11,
    ]
    nan = float("nan")
    for r in history:
        neg = r.train.negatives or NegativeStatistics()
        target = r.train.target or DPORound()
        failure = r.rollout.failure_agent
        agent = r.train.failure_agent or DPORound()
        lines.append(
            f"| {r.iteration} | {neg.count:.0f} | "
            f"{neg.mean_progress:.2f} | {neg.best_progress:.2f} | "
            f"{_pct(r.train.negatives and neg.near_success)} | {target.pairs:.0f} | "
            f"{_num(target.train_loss, nan):.4f} | "
            f"{_num(target.reward_margin, nan):.4f} | "
            f"{_pct(failure.success if failure else None)} | "
            f"{failure.mean_failure_progress if failure else nan:.2f} | "
            f"{agent.pairs:.0f} |"
        )
    return lines


def gain_over_warm_start(
    run: LoopRun, warm: dict[str, Any], last: EvaluateMetrics | None
) -> list[str]:
    """The final evaluation against the warm start's, paired by task (the same tasks,
    greedy), overall and per category: what training added, with its interval."""
    before = warm.get("eval_per_task") or {}
    if last is None or not before or not set(before) & set(last.per_task):
        return []
    difference, (low, high) = paired_difference_ci(last.per_task, before)
    env = registry.get_environment(run.config.env)
    by_category: dict[str, list[str]] = defaultdict(list)
    for task_id in sorted(set(before) & set(last.per_task)):
        by_category[str(env.task(task_id).metadata.get("category", "all"))].append(task_id)
    lines = [
        "",
        f"Against the warm start, paired by task ({sum(map(len, by_category.values()))} "
        f"tasks): **{100 * difference:+.1f} points** (95% interval {100 * low:+.1f} to "
        f"{100 * high:+.1f}).",
        "",
        "| category | tasks | warm start | after training | difference [95% interval] |",
        "|---|---|---|---|---|",
    ]
    for name, ids in sorted(by_category.items()):
        diff, (lo, hi) = paired_difference_ci(
            {t: last.per_task[t] for t in ids}, {t: before[t] for t in ids}
        )
        warm_rate = sum(before[t] for t in ids) / len(ids)
        final_rate = sum(last.per_task[t] for t in ids) / len(ids)
        lines.append(
            f"| {name} | {len(ids)} | {_pct(warm_rate)} | {_pct(final_rate)} | "
            f"{100 * diff:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] |"
        )
    return lines


def write_report(
    run: LoopRun,
    baseline: dict[str, Any],
    warm: dict[str, Any],
    history: list[IterationMetrics],
    interface: InterfaceVersion,
) -> Path:
    """Write report.md and its plots into the run directory."""
    out = run.run_dir
    plot_success(history, baseline, warm, out / "success.png")
    plot_labels(history, out / "labels.png")
    plot_advantages(history, out / "advantages.png")
    config = run.config
    splits = history[-1].evaluate.splits if history and history[-1].evaluate else {}
    last = next((r.evaluate for r in reversed(history) if r.evaluate), None)
    lines = [
        f"# seal-graph training report — {run.run_id}",
        "",
        f"**{config.algo}** on `{config.env}`, {len(history)} iterations, "
        f"{config.rollout.tasks_per_iteration} tasks x {config.rollout.group_size} samples per "
        f"iteration, swap `{config.swap}`; weighting `{config.weighting_mode}`, "
        f"adaptation {'on' if config.ablation.adaptation else 'off'}, closed loop "
        f"{'on' if config.ablation.closed_loop else 'off'}.",
        "",
        f"Evaluation success ({config.eval.split}, base interface, temperature 0): "
        f"**{_pct(baseline.get('success'))} before training"
        + (
            f" -> {_pct(warm.get('eval_success'))} after the warm start "
            f"({config.warm_start.epochs} SFT epochs over {warm.get('episodes')} expert "
            f"sequences, {warm.get('optimizer_steps')} steps of {config.warm_start.batch_size}, "
            f"{warm.get('tokens_per_second', 0):.0f} trained tokens/s)"
            if warm
            else ""
        )
        + f" -> {_pct(last.success if last else None)} after training**"
        + (_interval(last.ci) if last else "")
        + "."
        + (
            f" Sampled ({config.eval.samples} episodes per task at temperature "
            f"{config.rollout.temperature}): **{_pct(last.sampled_success)}**"
            f"{_interval(last.sampled_ci)}."
            if last and last.sampled_success is not None
            else ""
        )
        + "".join(
            f" After training on the `{split}` split: **{_pct(splits[split].success)}**"
            f"{_interval(splits[split].ci)}."
            if split in splits
            else ""
            for split in config.eval.final_splits
        ),
        *gain_over_warm_start(run, warm, last),
        "",
        "![success](success.png) ![labels](labels.png) ![advantages](advantages.png)",
        "",
        "## Iterations",
        "",
        "| it | train success | eval success | zero-signal groups | samples | loss | "
        f"interface | swap (load to verified) | requests in flight (of "
        f"{config.rollout.concurrency}) | " + " | ".join(f"{s} s" for s in STAGES) + " |",
        "|" + "---|" * (9 + len(STAGES)),
    ]
    for r in history:
        swap_text = ("ok" if r.swap.ok else "FAILED") + (
            f" {r.swap.seconds:.2f} s" if r.swap.seconds else ""
        )
        loss = None if r.train.loss is None else round(r.train.loss, 4)
        lines.append(
            f"| {r.iteration} | {_pct(r.rollout.train_success)} | "
            f"{_pct(r.evaluate.success if r.evaluate else None)} | "
            f"{r.train.zero_signal_groups}/{r.train.groups} | {r.train.samples} | {loss} | "
            f"v{r.interface_version} | {swap_text} | {r.rollout.requests_in_flight or '—'} | "
            + " | ".join(f"{r.stage_seconds(s):.1f}" for s in STAGES)
            + " |"
        )
    lines += label_section(history)
    lines += abstention_section(warm, history)
    lines += run.algorithm.report_sections(history)
    lines += ["", "## What the interface became", ""]
    if interface.adaptations:
        for a in interface.adaptations:
            lines.append(f"- **{a.kind}** `{a.key}` (since v{a.since_version}): {a.text}")
    else:
        lines.append("- the base interface (no adaptation)")
    changes = [(r.iteration, r.evolve.change) for r in history]
    lines += ["", "Changes by iteration:", ""]
    lines += [f"- iteration {it}: {change}" for it, change in changes if change]
    lines += [
        "",
        "## Notes",
        "",
        "- A zero-signal group (all samples with the same reward) gives GRPO no "
        "gradient; its samples are skipped when the KL coefficient is 0.",
        "- Swap: from the load request to the verified answer; the `swap s` column is the "
        "whole stage (checkpoint writing and the probe's references included), the time "
        "the console prints.",
        "- Every swap is verified: the server's logprobs of a probe must match the "
        f"trainer's within {run.sync.tolerance} (mean per token); a stale swap is caught "
        "when the probe change (old weights vs the new policy) exceeds that.",
        "",
        "## Config",
        "",
        "```json",
        json.dumps(config.model_dump(mode="json"), indent=2),
        "```",
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
