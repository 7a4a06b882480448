"""The learning benchmark's report: paired differences with intervals, tables, curves and
the targets, rebuilt from the per-run files (`benchmarks/learning.py --report-only`)."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from learning_runs import (
    BASELINE,
    RESULTS,
    SFT_MORE,
    _signal,
    benchmark_config,
    load,
    run_config,  # benchmarks/learning_runs.py
)
from machine import cpu_of, machine_of  # benchmarks/machine.py

from seal_graph.labels import SUCCESS_LABELS, UNTRUSTED_LABELS
from seal_graph.registry import get_environment
from seal_graph.runners.evaluation import category
from seal_graph.stats import holm, seeds_and_tasks_ci, sign_flip_p


def points(value: float) -> float:
    return round(100 * value, 1)


def interval(mean: float, ci: tuple[float, float]) -> dict[str, Any]:
    return {"mean": points(mean), "ci": [points(ci[0]), points(ci[1])]}


def differences(runs: list[dict], others: list[dict] | dict, key: str) -> list[dict]:
    """Per-task differences of each run to its paired other run (same seed) or to one
    fixed reference (the warm start)."""
    out = []
    for run in runs:
        other = (
            others
            if isinstance(others, dict)
            else next((o for o in others if o["seed"] == run["seed"]), None)
        )
        if other is None:
            continue
        mine, theirs = run_values(run, key), run_values(other, key)
        out.append({t: mine[t] - theirs[t] for t in mine.keys() & theirs.keys()})
    return out


def run_values(run: dict, key: str) -> dict[str, float]:
    """Per-task success of a run (or the warm start) on test greedy, test sampled or ood."""
    split, field = {"test": ("test", "per_task"), "test_sampled": ("test", "sampled_per_task"),
                    "ood": ("ood", "per_task")}[key]  # fmt: skip
    return run[split][field]


SPLITS = ("test", "test_sampled", "ood")
REFERENCES = {"warm_start": None, "vanilla": BASELINE, "sft_more": SFT_MORE}
"""What every row is compared with, paired by task (and by seed for the rows)."""


def summary(runs: list[dict], warm: dict) -> dict[str, Any]:
    """learning.json: per method, mean and 95% interval (seeds and tasks resampled) of
    each score, per category too, and of the paired differences to the warm start, to
    vanilla GRPO and to sft-more, each with a seed-level sign-flip p-value and its Holm
    adjustment over every comparison reported; the budget each row spent."""
    methods: dict[str, Any] = {}
    family: dict[str, float] = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method]
        entry: dict[str, Any] = {"seeds": len(mine)}
        for key in SPLITS:
            entry[key] = interval(*seeds_and_tasks_ci([run_values(r, key) for r in mine]))
        entry["by_category"] = {key: by_category(mine, warm, key) for key in SPLITS}
        entry["comparisons"] = {}
        for name, reference in REFERENCES.items():
            if reference == method:
                continue
            others = warm if reference is None else [r for r in runs if r["method"] == reference]
            for key in SPLITS:
                paired = differences(mine, others, key)
                if not paired:
                    continue
                compared = interval(*seeds_and_tasks_ci(paired))
                compared["p"] = sign_flip_p([statistics.fmean(d.values()) for d in paired])
                entry["comparisons"][f"{name}/{key}"] = compared
                family[f"{method} vs {name}/{key}"] = compared["p"]
                if key == "test":
                    entry[f"delta_{name}"] = compared
        entry["budget"] = budget(mine)
        entry["minutes_per_run"] = round(statistics.fmean(r["minutes"] for r in mine), 1)
        entry["resumed_runs"] = sum(bool(r.get("resumed")) for r in mine)
        tokens = [t for r in mine if (t := r.get("tokens_per_trained_episode"))]
        entry["tokens_per_trained_episode"] = round(statistics.fmean(tokens)) if tokens else None
        entry["optimizer_steps_per_run"] = statistics.fmean(r["optimizer_steps"] for r in mine)
        methods[method] = entry
    adjusted = holm(family) if family else {}
    for method, entry in methods.items():
        for name, compared in entry["comparisons"].items():
            compared["p_holm"] = adjusted[f"{method} vs {name}"]
    warm_entry = {
        key: interval(*seeds_and_tasks_ci([run_values(warm, key)]))
        for key in ("test", "test_sampled", "ood")
    }
    if "repeat" in warm:  # the same weights evaluated twice: evaluation noise
        warm_entry["repeat_delta"] = {
            key: interval(*seeds_and_tasks_ci(differences([warm["repeat"]], warm, key)))
            for key in SPLITS
        }
    return {"warm_start": warm_entry, "methods": methods, "comparisons": len(family)}


def by_category(runs: list[dict], warm: dict, key: str) -> dict[str, Any]:
    """Per task category: success and the paired difference to the warm start."""
    categories: dict[str, Any] = {}
    for name in sorted({category_of(t) for r in runs for t in run_values(r, key)}):

        def only(values: dict[str, float], name: str = name) -> dict[str, float]:
            return {t: v for t, v in values.items() if category_of(t) == name}

        scores = [only(run_values(r, key)) for r in runs]
        reference = only(run_values(warm, key))
        categories[name] = {
            "success": interval(*seeds_and_tasks_ci(scores)),
            "delta_warm_start": interval(
                *seeds_and_tasks_ci([{t: s[t] - reference[t] for t in s} for s in scores])
            ),
        }
    return categories


def category_of(task_id: str) -> str:
    """A kv-calc task's category (`base`, `miss_param`, `miss_func`, `long_context`,
    `ood`), from the environment's own metadata."""
    return _CATEGORIES.setdefault(task_id, category(get_environment("kv-calc").task(task_id)))


_CATEGORIES: dict[str, str] = {}


def budget(runs: list[dict]) -> dict[str, float | None]:
    """What a row spent per run, averaged over its seeds (None for round-1 records)."""
    spent = [r["budget"] for r in runs if "budget" in r]
    keys = ("episodes", "trained_tokens", "expert_sequences", "optimizer_steps")
    if not spent:
        return dict.fromkeys(keys)
    return {k: round(statistics.fmean(b[k] for b in spent), 1) for k in keys}


def _cell(entry: dict | None) -> str:
    if not entry:
        return "—"
    return f"{entry['mean']:+.1f} [{entry['ci'][0]:+.1f}, {entry['ci'][1]:+.1f}]"


def _score(entry: dict) -> str:
    return f"{entry['mean']:.1f} [{entry['ci'][0]:.1f}, {entry['ci'][1]:.1f}]"


def plot_curves(runs: list[dict], path: Path) -> None:
    """Training success per iteration (mean over seeds) and SEAL's failure labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (curves, labels_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r["curve"] for r in runs if r["method"] == method]
        steps = min(len(c) for c in mine)
        mean = [statistics.fmean(c[i]["train_success"] for c in mine) for i in range(steps)]
        curves.plot(range(1, steps + 1), mean, "o-", label=method)
    curves.set(xlabel="iteration", ylabel="training success (mean over seeds)")
    curves.xaxis.get_major_locator().set_params(integer=True)
    curves.legend(fontsize=7)
    seal = [r["curve"] for r in runs if r["method"] == "seal"]
    names = sorted({n for c in seal for it in c for n in it["labels"]} - SUCCESS_LABELS)
    iterations = min((len(c) for c in seal), default=0)
    width = 0.8 / max(iterations, 1)
    for i in range(iterations):
        values = [statistics.fmean(c[i]["labels"].get(n, 0.0) for c in seal) for n in names]
        labels_ax.bar([j + (i - (iterations - 1) / 2) * width for j in range(len(names))],
                      values, width, label=f"iteration {i + 1}")  # fmt: skip
    labels_ax.set_xticks(range(len(names)), names, rotation=40, ha="right", fontsize=7)
    labels_ax.set(ylabel="share of labelled turns", title="SEAL: failure labels")
    labels_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def throughput_lines(warm: dict, runs: list[dict]) -> list[str]:
    """The GRPO step's and the warm start's useful tokens per second (episode tokens, no
    repeats, no padding; per second of the whole train stage, its no-grad behaviour pass
    and trainer set-up included) against this machine's training limit, where
    `benchmarks/performance.py --only limit` measured one.

    The verdict takes the step as the code takes it now: the runs that forwarded each row
    alone (no padding share), else the step replayed on a run's episodes
    (`performance.py --only step`) on the limit's machine. Runs made before that change
    forwarded their micro-batches padded together; they are shown apart. Only runs and a
    warm start made on the limit's CPU compare with it."""
    saved = RESULTS.parent / "performance.json"
    measured = load(saved) if saved.exists() else {}
    limit, replay = measured.get("limit"), measured.get("step")
    cpu = cpu_of(machine_of(limit["command"])) if limit else None
    steps = [
        r
        for r in runs
        if r.get("episode_tokens") and r.get("train_seconds") and cpu_of(r["machine"]) == cpu
    ]
    precision = steps[0].get("train_precision", "fp32") if steps else None
    if not steps or cpu_of(warm["machine"]) != cpu or precision not in limit["data"]:
        return ["- Useful training tokens per second: the training limit of the runs' CPU is "
                "not measured yet (`.venv/bin/python benchmarks/performance.py --only limit` "
                "on it)."]  # fmt: skip
    alone = [r for r in steps if not r.get("padding_share")]
    padded = [r for r in steps if r.get("padding_share")]
    sft = warm["sft"]["trained_tokens"] / warm["sft"]["seconds"]
    top = limit["data"][precision]["max"]
    if alone:
        grpo, source = useful_rate(alone), pooled(alone)
    elif replay and machine_of(replay["command"]) == machine_of(limit["command"]):
        data = replay["data"]
        grpo = data["useful_tokens_per_s"]
        source = f"{data['episodes']} episodes of {data['source']} replayed: `{replay['command']}`"
    else:
        grpo, source = useful_rate(padded), pooled(padded)
    ok = min(grpo, sft) >= 0.6 * top
    lines = [
        f"- Useful training tokens per second (episode tokens once, no padding, over the "
        f"whole step): GRPO step {grpo:.0f} ({source}), warm start {sft:.0f}; the limit, "
        f"LoRA forward+backward+AdamW in {precision}, is {top:.0f} tokens/s "
        f"(`{limit['command']}`): {grpo / top:.2f}x and {sft / top:.2f}x, target >= 0.6x: "
        f"{'**met**' if ok else '**missed**'}."
    ]
    if padded and (alone or replay):
        inside = sum(r["trainer_loop_seconds"] for r in padded)
        padding = statistics.fmean(r["padding_share"] for r in padded)
        before = useful_rate(padded)
        real = sum(r["trainer_loop_tokens_per_second"] * r["trainer_loop_seconds"] for r in padded)
        lines.append(
            f"- The {len(padded)} GRPO runs made before the step forwarded each row alone "
            f"took {before:.0f} useful tokens/s "
            f"({before / top:.2f}x): their micro-batches went through the "
            f"model padded together ({100 * padding:.0f}% "
            f"padding) and TRL's fused LM head projected every position, the first prompt's "
            f"too; TRL's optimisation loop was "
            f"{100 * inside / sum(r['train_seconds'] for r in padded):.0f}% of the step at "
            f"{real / inside:.0f} forwarded real tokens/s. The loss is the same either way "
            f"(`tests/test_grpo_minibatches.py`), so their learning compares with later runs'."
        )
    return lines


def pooled(runs: list[dict]) -> str:
    """Where a pooled step figure comes from, in words."""
    return "the one run's steps" if len(runs) == 1 else f"the {len(runs)} runs' steps pooled"


def useful_rate(runs: list[dict]) -> float:
    """Episode tokens per second of the runs' train stages, pooled."""
    return sum(r["episode_tokens"] for r in runs) / sum(r["train_seconds"] for r in runs)


def against_targets(table: dict, runs: list[dict], planned_seeds: int) -> list[str]:
    """The issue's numbers, each marked met or missed, and what the runs show about why."""
    seal, warm = table["methods"].get("seal"), table["warm_start"]
    if seal is None:
        return []

    def verdict(ok: bool) -> str:
        return "**met**" if ok else "**missed**"

    gain, over_vanilla = seal["delta_warm_start"], seal.get("delta_vanilla")
    ratios = [r["forwarded_per_episode_token"] for r in runs if r["forwarded_per_episode_token"]]
    groups = [c for r in runs for c in r["curve"] if c.get("groups")]
    silent = sum(c["zero_signal_groups"] for c in groups)
    total = sum(c["groups"] for c in groups)
    lines = [
        "",
        f"## Against the targets (SEAL = trajectory weights; {seal['seeds']} of "
        f"{planned_seeds} seeds)",
        "",
        f"- SEAL >= +15 points over the warm start on test (greedy), interval excluding 0: "
        f"{_cell(gain)}: {verdict(gain['mean'] >= 15 and gain['ci'][0] > 0)}.",
        f"- SEAL >= +5 points over vanilla GRPO at equal budget: {_cell(over_vanilla)}: "
        + (verdict(over_vanilla["mean"] >= 5) if over_vanilla else "not measured yet")
        + ".",
        f"- SEAL on `ood` above the warm start: {_score(seal['ood'])} vs "
        f"{_score(warm['ood'])}: {verdict(seal['ood']['mean'] > warm['ood']['mean'])}.",
    ]
    if ratios:
        lines.append(
            f"- Training tokens forwarded per token of the trained episodes <= 1.3: "
            f"{statistics.fmean(ratios):.2f} on average over {len(ratios)} runs "
            f"(largest {max(ratios):.2f}): {verdict(statistics.fmean(ratios) <= 1.3)}."
        )
    if total:
        lines.append(
            f"- What limits the signal: {silent} of {total} GRPO groups "
            f"({100 * silent / total:.0f}%) had one reward for all their episodes, so no "
            "gradient; training success at the rollout temperature averages "
            f"{100 * statistics.fmean(c['train_success'] for c in groups):.0f}% (per-run "
            "table below), against "
            f"{100 * statistics.fmean(r['test']['success'] for r in runs):.0f}% greedy "
            "test success after training."
        )
    lines += diagnosis_weights(runs)
    signal = RESULTS.parent / "grpo_signal.json"  # benchmarks/grpo_signal.py
    if signal.exists():
        rows = load(signal)["rows"]
        lines.append(
            "- Signal by warm start and temperature on training tasks "
            "([grpo_signal.md](grpo_signal.md)): "
            + "; ".join(
                f"{r['warm_steps'] or 'the kept warm start'}"
                f"{' SFT steps' if r['warm_steps'] else ''} at temperature "
                f"{r['temperature']}: {100 * r['success']:.0f}% success, "
                f"{100 * r['mixed_groups']:.0f}% mixed groups"
                for r in rows
            )
            + "."
        )
    return lines


def diagnosis_weights(runs: list[dict]) -> list[str]:
    """Where rho ended, per label the SEAL runs saw: how far the diagnosis could reweight
    an advantage (runs made before rho was recorded are left out)."""
    ended = [r for r in runs if r["curve"] and "rho" in r["curve"][-1]]
    if not ended:
        return []
    table = benchmark_config().weighting.rho
    seen = sorted({k for r in ended for c in r["curve"] for k in c["labels"]} - UNTRUSTED_LABELS)
    finals = {k: [r["curve"][-1]["rho"].get(k, 1.0) for r in ended] for k in seen}
    spread = max(abs(v - 1.0) for values in finals.values() for v in values)
    return [
        f"- How far SEAL's diagnosis reweighted ({len(ended)} runs that recorded rho: "
        + ", ".join(f"{r['method']} s{r['seed']}" for r in ended)
        + "): rho after the last iteration "
        + "; ".join(
            f"{k} {min(v):.2f}-{max(v):.2f} (from {table.get(k, 1.0):.1f})"
            for k, v in finals.items()
        )
        + f". Every weight stayed within {100 * spread:.0f}% of 1"
        + (
            ": the paper's rho table (written in BFCL's per-turn tags) gives kv-calc's "
            "labels 1.0 or does not name them (1.0 too), and only dynamic rho moves them. "
            "Here SEAL differs from vanilla GRPO by its interface evolution, hardly by its "
            "weights."
            if all(table.get(k, 1.0) == 1.0 for k in seen)
            else "."
        )
    ]


def machine_lines(warm: dict, runs: list[dict]) -> list[str]:
    """One bullet per machine the results were made on, naming its runs (minutes per run
    compare only within one machine)."""
    made_on: dict[str, list[str]] = {}
    for r in [warm, *runs]:
        name = "warm start" if r is warm else f"{r['method']} s{r['seed']}"
        made_on.setdefault(r["machine"], []).append(name)
    return [f"- {machine}: {', '.join(names)}" for machine, names in made_on.items()]


def write_report(args: argparse.Namespace, warm: dict, runs: list[dict]) -> list[Path]:
    """learning.json and learning.md from the result files; returns what was written."""
    docs = RESULTS.parent
    table = summary(runs, warm)
    (docs / "learning.json").write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    plot_curves(runs, docs / "learning_curves.png")
    config = run_config(runs[0]["method"], runs[0]["seed"], args)
    w = table["warm_start"]
    lines = [
        "# Learning on CPU: kv-calc, the bundled SmolLM2-135M",
        "",
        f"Rebuilt from `docs/results/learning/*.json` by `benchmarks/learning.py` on "
        f"{time.strftime('%Y-%m-%d %H:%M')}. {len(runs)} of "
        f"{len(args.methods) * len(args.seeds)} planned runs finished, on:",
        "",
        *machine_lines(warm, runs),
        "",
        f"Budget per run: {args.iterations} iterations of {args.tasks} tasks x {args.group} "
        f"episodes at temperature {config.rollout.temperature} from one shared warm start "
        f"({warm['settings']['steps']} SFT steps of {warm['settings']['batch_size']} expert "
        f"episodes); GRPO takes {args.mini_batches} optimiser "
        f"steps per iteration over all of its episodes (whole-episode sequences), DPO one "
        f"round of at most {args.pairs} pairs in as many optimiser steps. "
        f"Evaluation on the base interface: greedy and sampled ({args.eval_samples} "
        f"episode{'s' if args.eval_samples > 1 else ''} per task at temperature "
        f"{config.rollout.temperature}) on all {len(warm['test']['per_task'])} `test` "
        f"tasks, greedy on all {len(warm['ood']['per_task'])} `ood` tasks, each on a "
        "float32 server without LoRA (the run's own after full-weight swaps; for the runs "
        "that serve LoRA adapters, coevolve-dpo's, a fresh one serving the final adapter "
        "merged, as the warm start is evaluated). Points (0-100): "
        "mean [95% interval]; intervals resample seeds and tasks; differences are paired "
        "by task (and by seed for vanilla GRPO).",
        "",
        "| method | seeds | test (greedy) | test (sampled) | ood | vs warm start | "
        "vs vanilla GRPO | minutes per run | training tokens per trained episode |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| warm start | — | {_score(w['test'])} | {_score(w['test_sampled'])} | "
        f"{_score(w['ood'])} | — | — | {warm['minutes']:.1f} | — |",
    ]
    for method, m in table["methods"].items():
        lines.append(
            f"| {method} | {m['seeds']} | {_score(m['test'])} | {_score(m['test_sampled'])} | "
            f"{_score(m['ood'])} | {_cell(m['delta_warm_start'])} | "
            f"{_cell(m.get('delta_vanilla'))} | {m['minutes_per_run']}"
            f"{'*' if m.get('resumed_runs') else ''} | "
            f"{m['tokens_per_trained_episode'] or '— (DPO)'} |"
        )
    lines += [
        "",
        "Minutes per run are the loop stages' wall time (rollouts, training, swaps, "
        "evaluations; for a LoRA-served run also its merge and final evaluation, that "
        "server's start included; other server start-ups left out), so a run interrupted "
        "and resumed "
        "counts each iteration once; * marks a mean over runs of which some were "
        "interrupted and resumed, whose cut-off stage counts only its last attempt (low by "
        "up to that stage's length); minutes compare only between runs made on one "
        "machine (listed above). The shared warm start is the bundled model with the "
        "adapter kept in `docs/results/learning/warm-start-adapter/` merged in (CPU SFT "
        "is not bitwise reproducible; a fresh checkout rebuilds the checkpoint from it).",
        *([f"Warm start minutes: {warm['minutes_note']}."] if "minutes_note" in warm else []),
        *against_targets(table, runs, len(args.seeds)),
        *throughput_lines(warm, runs),
        "",
        "![training success per iteration; SEAL's failure labels](learning_curves.png)",
        "",
        "Per run and iteration: training success, then zero-signal groups (GRPO) or the "
        "target's DPO pairs and its reward margin after the round (DPO).",
        "",
        "| run | " + " | ".join(f"it {i + 1}" for i in range(args.iterations)) + " |",
        "|---|" + "---|" * args.iterations,
    ]
    for r in runs:
        cells = [f"{100 * c['train_success']:.0f}% ({_signal(c)})" for c in r["curve"]]
        lines.append(f"| {r['method']} s{r['seed']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Command: `{f'.venv/bin/python benchmarks/learning.py {args.command}'.strip()}`.",
        "",
        "Config of the first run:",
        "",
        "```json",
        config.model_dump_json(indent=2),
        "```",
    ]
    (docs / "learning.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [docs / "learning.json", docs / "learning.md", docs / "learning_curves.png"]
