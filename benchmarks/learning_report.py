"""The learning benchmark's numbers (`docs/results/learning.json`): per row its scores,
paired differences with intervals, p-values with Holm's adjustment, per-category results,
budget and training signal, rebuilt from the per-run files; `learning_page` writes them
up (`benchmarks/learning.py --report-only`)."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from typing import Any

from learning_runs import BASELINE, ROOT, SEAL, SFT_MORE  # benchmarks/learning_runs.py

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
REFERENCES = {"warm_start": None, "vanilla": BASELINE, "sft_more": SFT_MORE, "seal": SEAL}
"""What a row is compared with, paired by task (and by seed for the rows); SEAL only by
its own variants (`references`)."""


def references(method: str) -> dict[str, str | None]:
    """The rows `method` is compared with: every row with the warm start, vanilla GRPO
    and sft-more; SEAL's variants (`seal-*`: ablations, the turn-level and DPO variants)
    with SEAL too, since what they ask is what that one change does to SEAL."""
    return {
        name: reference
        for name, reference in REFERENCES.items()
        if reference != method and (reference != SEAL or method.startswith(f"{SEAL}-"))
    }


def summary(runs: list[dict], warm: dict) -> dict[str, Any]:
    """learning.json: per method, mean and 95% interval (seeds and tasks resampled) of
    each score, per category too, and of the paired differences to the rows `references`
    names, each with a seed-level sign-flip p-value and its Holm adjustment over every
    comparison reported; the budget each row spent."""
    methods: dict[str, Any] = {}
    family: dict[str, float] = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method]
        entry: dict[str, Any] = {"seeds": len(mine)}
        for key in SPLITS:
            entry[key] = interval(*seeds_and_tasks_ci([run_values(r, key) for r in mine]))
        entry["by_category"] = {key: by_category(mine, warm, runs, key) for key in SPLITS}
        entry["comparisons"] = {}
        for name, reference in references(method).items():
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
        entry["abstention"] = mean_abstention([r["test"].get("abstention") for r in mine])
        entry["curve"] = val_curve(method)
        entry["budget"] = budget(mine)
        entry["signal"] = signal(mine)
        entry["train_by_category"] = training_by_category(mine)
        repeated = [r for r in mine if "repeat" in r]
        if repeated:  # a final checkpoint evaluated twice: evaluation noise
            entry["repeat_delta"] = {
                f"s{r['seed']}": {
                    key: interval(*seeds_and_tasks_ci(differences([r["repeat"]], r, key)))
                    for key in SPLITS
                }
                for r in repeated
            }
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
    warm_entry["abstention"] = mean_abstention([warm["test"].get("abstention")])
    if "repeat" in warm:  # the same weights evaluated twice: evaluation noise
        warm_entry["repeat_delta"] = {
            key: interval(*seeds_and_tasks_ci(differences([warm["repeat"]], warm, key)))
            for key in SPLITS
        }
    return {"warm_start": warm_entry, "methods": methods, "comparisons": len(family)}


RATES = ("call_rate", "no_call_rate", "names_missing_rate")


def mean_abstention(found: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Greedy `test` abstention rates (`seal_graph.abstention`) per category, in points,
    the mean over the seeds that measured them (None where no run did)."""
    measured = [f for f in found if f]
    if not measured:
        return None
    table: dict[str, Any] = {}
    for name in sorted({c for f in measured for c in f}):
        rates = [f[name] for f in measured if name in f]
        table[name] = {
            rate: points(statistics.fmean(values))
            if (values := [r[rate] for r in rates if r.get(rate) is not None])
            else None
            for rate in RATES
        }
        table[name]["seeds"] = len(rates)
    return table


def val_curve(method: str) -> list[dict[str, Any]]:
    """The row's `val` success per iteration from its curve runs (`--curves`), the mean
    over seeds that reached the iteration, at the pinned settings (not a `--curve-optim`
    experiment); empty where the row has no curve."""
    from curves_page import mean_curve  # benchmarks/curves_page.py
    from learning_curves import finished_curves  # benchmarks/learning_curves.py

    mine = [c for c in finished_curves() if c["method"] == method and not c.get("optim")]
    return [
        {
            "iteration": i,
            "val_success": round(success, 1),
            "seeds": sum(any(p["iteration"] == i and p["val"] for p in c["points"]) for c in mine),
        }
        for i, success in mean_curve(mine).items()
    ]


def by_category(runs: list[dict], warm: dict, everything: list[dict], key: str) -> dict:
    """Per task category: success and the paired differences to the rows `references`
    names (by seed; where those rows have the seed)."""
    categories: dict[str, Any] = {}
    for name in sorted({category_of(t) for r in runs for t in run_values(r, key)}):
        entry = {"success": interval(*seeds_and_tasks_ci([only(r, key, name) for r in runs]))}
        for reference, method in references(runs[0]["method"]).items():
            others = warm if method is None else [r for r in everything if r["method"] == method]
            paired = [
                {t: v - theirs[t] for t, v in mine.items()}
                for mine, theirs in category_pairs(runs, others, key, name)
            ]
            if paired:
                entry[f"delta_{reference}"] = interval(*seeds_and_tasks_ci(paired))
        categories[name] = entry
    return categories


def only(run: dict, key: str, name: str) -> dict[str, float]:
    """A run's per-task values on one task category."""
    return {t: v for t, v in run_values(run, key).items() if category_of(t) == name}


def category_pairs(
    runs: list[dict], others: list[dict] | dict, key: str, name: str
) -> list[tuple[dict, dict]]:
    """Each run's values on one category beside its reference's (same seed, or the one
    fixed reference)."""
    pairs = []
    for run in runs:
        other = others if isinstance(others, dict) else next(
            (o for o in others if o["seed"] == run["seed"]), None
        )  # fmt: skip
        if other is not None:
            pairs.append((only(run, key, name), only(other, key, name)))
    return pairs


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


def signal(runs: list[dict]) -> dict[str, Any]:
    """What a row's training had to learn from, per iteration over its seeds: GRPO groups
    with one reward for all their episodes (no gradient), and SEAL's diagnosis weights
    (rho by tag, mean over seeds) where the run recorded them."""
    iterations = min(len(r["curve"]) for r in runs)
    out: dict[str, Any] = {"zero_signal_groups": [], "rho": []}
    for i in range(iterations):
        points = [r["curve"][i] for r in runs]
        grouped = [c for c in points if c.get("groups")]
        out["zero_signal_groups"].append(
            [sum(c["zero_signal_groups"] for c in grouped), sum(c["groups"] for c in grouped)]
            if grouped
            else None
        )
        weighted = [c["rho"] for c in points if c.get("rho")]
        tags = sorted({t for rho in weighted for t in rho})
        out["rho"].append(
            {t: round(statistics.fmean(rho.get(t, 1.0) for rho in weighted), 3) for t in tags}
            if weighted
            else None
        )
    return out


def training_by_category(runs: list[dict]) -> list[dict[str, float]]:
    """Per iteration, the policy's training success by task category (mean over its
    seeds' episodes, from the exported episodes files): where the learning signal was.
    Empty for rows without training rollouts (sft-more)."""
    by_iteration: dict[int, dict[str, list[float]]] = {}
    for run in runs:
        path = ROOT / run.get("episodes_file", "")
        if not path.is_file():
            continue
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                episode = json.loads(line)
                matched = re.fullmatch(r".*/it(\d+)", episode["run_id"])
                if matched is None:  # evaluations, the failure agent's rollouts
                    continue
                bucket = by_iteration.setdefault(int(matched[1]), {})
                bucket.setdefault(category_of(episode["task_id"]), []).append(
                    float(episode["success"])
                )
    return [
        {name: points(statistics.fmean(v)) for name, v in sorted(by_iteration[i].items())}
        for i in sorted(by_iteration)
    ]
