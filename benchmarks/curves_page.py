"""The curves' page, `docs/results/curves.md` (+ `curves.png`): val success per iteration
per row, the budget the curves choose, and SEAL's mechanism chain per iteration, rebuilt
from the curve files (`benchmarks/learning_curves.py`) after each one."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from learning_curves import CURVES, WARM_POINT, curve_label, finished_curves
from learning_runs import ROOT, load

PAGE = ROOT / "docs/results/curves.md"
PLOT = ROOT / "docs/results/curves.png"
FLAT = 3.0
"""Points of smoothed val success a curve may still gain after the budget: the rule."""
WINDOW = 3
"""Evaluations averaged (trailing) before the rule reads a curve."""
BUDGET_ROWS = ("vanilla-grpo", "seal")
CHAIN_ROWS = ("vanilla-grpo", "seal", "seal-no-reweighting", "seal-no-adaptation")
MISS = ("miss_func", "miss_param")


def mean_curve(records: list[dict[str, Any]]) -> dict[int, float]:
    """Val success (%) per iteration, the mean over the seeds that reached it."""
    found: dict[int, list[float]] = {}
    for record in records:
        for point in record["points"]:
            if point["val"] is not None:
                found.setdefault(point["iteration"], []).append(100 * point["val"]["success"])
    return {i: statistics.fmean(v) for i, v in sorted(found.items())}


def budget(curve: dict[int, float]) -> int | None:
    """The first evaluated iteration after which the trailing mean of `WINDOW`
    evaluations never rises by `FLAT` points or more; None before `WINDOW` evaluations
    follow it."""
    its = sorted(curve)
    smooth = {
        its[k]: statistics.fmean(curve[j] for j in its[k - WINDOW + 1 : k + 1])
        for k in range(WINDOW - 1, len(its))
    }
    keys = list(smooth)
    for n, i in enumerate(keys):
        later = [smooth[j] for j in keys[n + 1 :]]
        if len(later) >= WINDOW and max(later) - smooth[i] < FLAT:
            return i
    return None


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def _rate(rates: dict[str, Any], name: str, key: str) -> str:
    return _pct((rates.get(name) or {}).get(key))


def chain_lines(records: list[dict[str, Any]]) -> list[str]:
    """Seed 0 of every chain row, per iteration: what the agent does on abstention turns
    while training, how many miss_* groups carry a gradient, how much of it the weights
    moved, and what the greedy agent does on `val`."""
    lines = [
        "| row | it | train no-call miss_func / miss_param | mixed groups miss_func / "
        "miss_param | advantage mass moved miss_func / miss_param / all | val no-call "
        "miss_func / miss_param | val call rate (turns that need a call) | val success |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for record in records:
        if record["seed"] != 0 or record["method"] not in CHAIN_ROWS:
            continue
        for p in record["points"]:
            train = " / ".join(_rate(p["train_abstention"], c, "no_call_rate") for c in MISS)
            mixed = " / ".join(_pct(p["mixed_groups"].get(c)) for c in MISS)
            moved = " / ".join(_pct(p["moved_advantage"].get(c)) for c in (*MISS, "all"))
            val = p["val"] or {}
            no_call = " / ".join(_rate(val.get("abstention", {}), c, "no_call_rate") for c in MISS)
            calls = _rate(val.get("abstention", {}), "all", "call_rate")
            success = _pct(val.get("success"))
            lines.append(
                f"| {curve_label(record)} | {p['iteration']} | {train} | {mixed} | {moved} | "
                f"{no_call} | {calls} | {success} |"
            )
    return lines


def curve_lines(records: list[dict[str, Any]], warm: dict[str, Any] | None) -> list[str]:
    """Per row and seed, val success per iteration (iteration 0: the warm start)."""
    longest = max((len(r["points"]) for r in records), default=0)
    head = ["row", "seed", "0", *(str(i) for i in range(1, longest + 1)), "s / iteration"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    start = _pct(warm["success"]) if warm else "—"
    for r in records:
        values = [_pct(p["val"]["success"]) if p["val"] else "—" for p in r["points"]]
        values += ["·"] * (longest - len(values))
        per = "—"
        if r["points"]:
            seconds = statistics.fmean(p["seconds"] for p in r["points"])
            with_val = statistics.fmean(p["seconds_with_val"] for p in r["points"])
            per = f"{seconds:.0f} ({with_val:.0f} with val)"
        state = "" if r["finished"] else " (unfinished)"
        lines.append(f"| {curve_label(r)}{state} | {r['seed']} | {start} | "
                     + " | ".join(values) + f" | {per} |")  # fmt: skip
    return lines


def budget_lines(records: list[dict[str, Any]]) -> list[str]:
    """The rule and what it reads from the finished curves of the budget rows."""
    lines = [
        f"Budget rule (fixed before the curves ran): per row, the mean over seeds of val "
        f"success per evaluated iteration, averaged over the last {WINDOW} evaluations; the "
        f"row's budget is the first iteration after which that average never rises by "
        f"{FLAT:g} points or more (with at least {WINDOW} evaluations after it); the table's "
        "budget is "
        f"the larger of {' and '.join(BUDGET_ROWS)}'s. Rows with other optimiser settings "
        "(val experiments) are read the same way.",
        "",
    ]
    finished = [r for r in records if r["method"] in BUDGET_ROWS and r["finished"]]
    labels = [*BUDGET_ROWS, *sorted({curve_label(r) for r in finished} - set(BUDGET_ROWS))]
    for row in labels:
        mine = [r for r in finished if curve_label(r) == row]
        if not mine:
            lines.append(f"- {row}: no finished curve yet.")
            continue
        curve = mean_curve(mine)
        found = budget(curve)
        verdict = f"iteration {found}" if found else "not flat within its iterations"
        peak = max(curve, key=lambda i: (curve[i], -i))
        last = max(curve)
        lines.append(
            f"- {row} ({len(mine)} seed(s) finished): the rule reads {verdict}; the "
            f"highest mean val success is {curve[peak]:.0f}% at iteration {peak}, the last "
            f"{curve[last]:.0f}% at iteration {last}."
        )
    return lines


def plot(records: list[dict[str, Any]], warm: dict[str, Any] | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4.5))
    for r in records:
        points = [(0, 100 * warm["success"])] if warm else []
        points += [(p["iteration"], 100 * p["val"]["success"]) for p in r["points"] if p["val"]]
        xs, ys = zip(*points, strict=True) if points else ((), ())
        axis.plot(xs, ys, marker="o", markersize=3, label=f"{curve_label(r)} s{r['seed']}")
    axis.set_xlabel("iteration")
    axis.set_ylabel("greedy val success (%)")
    axis.set_ylim(0, 100)
    if records:
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_curves_page() -> list[Path]:
    records = finished_curves()
    warm = load(WARM_POINT) if WARM_POINT.exists() else None
    machines = sorted({r["machine"] for r in records})
    commands = sorted({r["command"] for r in records})
    notes = sorted({r["note"] for r in records if r.get("note")})
    plot(records, warm, PLOT)
    lines = [
        "# Learning curves on `val`: the RL budget and SEAL's mechanism chain",
        "",
        f"Rebuilt from `{CURVES.relative_to(ROOT)}/` by `benchmarks/learning.py --curves` "
        "after each run. Every run is a round-3 table run (its warm start, settings and "
        "budget per iteration: [learning.md](learning.md)) taken further and evaluated "
        f"greedily on the same {records[0]['val_tasks'] if records else '—'} `val` tasks "
        "(round-robin over the categories) every "
        f"{records[0].get('val_every', 1) if records else '—'} iteration(s) and after the "
        "last; `test` is not read.",
        "",
        "Made on: " + "; ".join(machines) if machines else "Made on: —",
        "",
        "Commands: " + "; ".join(f"`.venv/bin/python {c}`" for c in commands)
        if commands
        else "No curve has finished an iteration yet.",
        *(["", "Notes: " + "; ".join(notes)] if notes else []),
        "",
        "## Val success per iteration",
        "",
        "Iteration 0 is the warm start (measured once). Seconds per iteration: its stages "
        "(rollout, diagnosis, evolution, GRPO step, verified swap), then with its val "
        "evaluation.",
        "",
        *curve_lines(records, warm),
        "",
        "![val success per iteration](curves.png)",
        "",
        "## The budget",
        "",
        *budget_lines(records),
        "",
        "## The mechanism chain (seed 0)",
        "",
        "Per iteration: the no-call rate on abstention turns in the training batch, the "
        "share of miss_* groups whose rewards differ (GRPO's only signal), the share of "
        "the step's advantage mass sum|A| the diagnosis weights moved, and the greedy "
        "agent's no-call rate on `val`'s abstention turns and its call rate on the turns "
        "that need a call. SEAL acts where the first four move (abstentions sampled, groups "
        "mixed on them, rho moving their advantages, the greedy agent abstaining more); the "
        "fifth shows what that costs where a call is needed.",
        "",
        *chain_lines(records),
    ]
    PAGE.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [PAGE, PLOT]
