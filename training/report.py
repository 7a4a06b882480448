"""The end-of-run report: Markdown a person would want to read, with PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on a server
import matplotlib.pyplot as plt

from seal_graph.interface import InterfaceVersion
from seal_graph.training.resources import LoopRun

STAGES = ("rollout", "diagnose", "evolve", "train", "swap", "evaluate")


def _get(record: dict[str, Any], stage: str, key: str, default: Any = None) -> Any:
    return (record.get(stage) or {}).get(key, default)


def _save(fig: Any, ax: Any, path: Path, legend_size: int, **axes: Any) -> None:
    """Label the axes, add the legend, write the PNG and free the figure."""
    ax.set(**axes)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_success(
    history: list[dict[str, Any]], baseline: dict[str, Any], warm: dict[str, Any], path: Path
) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    its = [r["iteration"] + 1 for r in history]
    ax.plot(
        its,
        [_get(r, "rollout", "train_success", 0) for r in history],
        "o-",
        label="training rollouts (adapted interface, sampled)",
    )
    evals = [(0, baseline.get("success"))] if baseline else []
    if warm:
        evals.append((0.5, warm.get("eval_success")))
    evals += [
        (r["iteration"] + 1, _get(r, "evaluate", "success")) for r in history if r.get("evaluate")
    ]
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


def plot_labels(history: list[dict[str, Any]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = sorted({k for r in history for k in _get(r, "diagnose", "label_prevalence", {})})
    its = [r["iteration"] + 1 for r in history]
    for label in labels:
        ax.plot(
            its,
            [_get(r, "diagnose", "label_prevalence", {}).get(label, 0.0) for r in history],
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


def plot_advantages(history: list[dict[str, Any]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    its = [r["iteration"] + 1 for r in history]
    ax.plot(
        its, [_get(r, "rollout", "train_reward", 0) for r in history], "o-", label="mean reward"
    )
    ax.plot(
        its,
        [_get(r, "train", "mean_abs_advantage", 0) for r in history],
        "s-",
        label="mean |advantage|",
    )
    ax.plot(
        its,
        [_get(r, "train", "mean_weight", 1) for r in history],
        "^-",
        label="mean diagnosis weight",
    )
    ax.plot(
        its,
        [
            _get(r, "train", "zero_signal_groups", 0) / max(_get(r, "train", "groups", 1), 1)
            for r in history
        ],
        "x--",
        label="share of zero-signal groups",
    )
    _save(fig, ax, path, 8, xlabel="iteration", title="Reward and advantage statistics")


def _pct(value: Any) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def hard_negative_section(history: list[dict[str, Any]]) -> list[str]:
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
    for r in history:
        train = r.get("train") or {}
        neg, target = train.get("negatives", {}), train.get("target", {})
        failure = (r.get("rollout") or {}).get("failure_agent", {})
        agent = train.get("failure_agent", {})
        lines.append(
            f"| {r['iteration'] + 1} | {neg.get('count', 0):.0f} | "
            f"{neg.get('mean_progress', 0):.2f} | {neg.get('best_progress', 0):.2f} | "
            f"{_pct(neg.get('near_success'))} | {target.get('pairs', 0):.0f} | "
            f"{target.get('train_loss', float('nan')):.4f} | "
            f"{target.get('reward_margin', float('nan')):.4f} | "
            f"{_pct(failure.get('success'))} | "
            f"{failure.get('mean_failure_progress', float('nan')):.2f} | "
            f"{agent.get('pairs', 0):.0f} |"
        )
    return lines


def write_report(
    run: LoopRun,
    baseline: dict[str, Any],
    warm: dict[str, Any],
    history: list[dict[str, Any]],
    interface: InterfaceVersion,
) -> Path:
    """Write report.md and its plots into the run directory."""
    out = run.run_dir
    plot_success(history, baseline, warm, out / "success.png")
    plot_labels(history, out / "labels.png")
    plot_advantages(history, out / "advantages.png")
    config = run.config
    last_eval = next(
        (_get(r, "evaluate", "success") for r in reversed(history) if r.get("evaluate")), None
    )
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
            f"({config.warm_start.steps} SFT steps, {warm.get('examples')} expert examples)"
            if warm
            else ""
        )
        + f" -> {_pct(last_eval)} after training**."
        + "".join(
            f" After training on the `{split}` split: **{_pct(_get(history[-1], 'evaluate', f'{split}_success'))}**."  # noqa: E501
            for split in config.eval.final_splits
            if history
        ),
        "",
        "![success](success.png) ![labels](labels.png) ![advantages](advantages.png)",
        "",
        "## Iterations",
        "",
        "| it | train success | eval success | zero-signal groups | samples | loss | "
        "interface | swap | " + " | ".join(f"{s} s" for s in STAGES) + " |",
        "|" + "---|" * (8 + len(STAGES)),
    ]
    for r in history:
        swap = r.get("swap") or {}
        swap_text = ("ok" if swap.get("ok") else "FAILED") + (
            f" {swap['seconds']:.2f} s" if swap.get("seconds") else ""
        )
        lines.append(
            f"| {r['iteration'] + 1} | {_pct(_get(r, 'rollout', 'train_success'))} | "
            f"{_pct(_get(r, 'evaluate', 'success'))} | "
            f"{_get(r, 'train', 'zero_signal_groups', 0)}/{_get(r, 'train', 'groups', 0)} | "
            f"{_get(r, 'train', 'samples', 0)} | "
            f"{_get(r, 'train', 'loss') if _get(r, 'train', 'loss') is None else round(_get(r, 'train', 'loss'), 4)} | "  # noqa: E501
            f"v{r['interface_version']} | {swap_text} | "
            + " | ".join(f"{_get(r, s, 'seconds', 0.0):.1f}" for s in STAGES)
            + " |"
        )
    lines += run.algorithm.report_sections(history)
    lines += ["", "## What the interface became", ""]
    if interface.adaptations:
        for a in interface.adaptations:
            lines.append(f"- **{a.kind}** `{a.key}` (since v{a.since_version}): {a.text}")
    else:
        lines.append("- the base interface (no adaptation)")
    changes = [(r["iteration"] + 1, _get(r, "evolve", "change")) for r in history]
    lines += ["", "Changes by iteration:", ""]
    lines += [f"- iteration {it}: {change}" for it, change in changes if change]
    lines += [
        "",
        "## Notes",
        "",
        "- A zero-signal group (all samples with the same reward) gives GRPO no "
        "gradient; its samples are skipped when the KL coefficient is 0.",
        "- Every swap is verified: the server's logprobs of a probe must match the "
        f"trainer's within {config.swap_tolerance}.",
        "",
        "## Config",
        "",
        "```json",
        json.dumps(config.model_dump(), indent=2),
        "```",
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
