"""The failure-label taxonomy: one label per user turn.

It covers the SEAL paper's labels (checked in priority order on a failed turn) and the
per-turn tags of BFCL's official checks. `gt_error` and `checker_error` mark turns whose
verdict cannot be trusted; they are excluded from weighting and from interface evolution.
"""

from __future__ import annotations

from typing import Literal, get_args

Label = Literal[
    # the turn succeeded
    "pass",
    "correct_abstention",
    # the paper's failure labels, in priority order (first match wins)
    "invalid_tool_call",
    "argument_mismatch",
    "state_mismatch",
    "recovery_failure",
    "missing_tool_call",
    "response_mismatch",
    # BFCL per-turn tags beyond those
    "spurious_tool_call",
    "empty_turn_model_response",
    "instance_mismatch",
    # untrustworthy verdicts
    "checker_error",
    "gt_error",
    # no per-turn evidence and no error: nothing supports a label
    "unverified",
]

LABELS: tuple[str, ...] = get_args(Label)

DESCRIPTIONS: dict[str, str] = {
    "pass": "The turn did what the user asked (state and results match).",
    "correct_abstention": "The turn needed no call and the agent made none.",
    "invalid_tool_call": "An unparseable call, an unknown tool, or arguments breaking the schema.",
    "argument_mismatch": "The right tools, but with wrong argument values.",
    "state_mismatch": "Calls executed, but the environment state differs from the reference.",
    "recovery_failure": "A tool returned an error and the agent did not recover.",
    "missing_tool_call": "The turn needed a call and the agent made none.",
    "response_mismatch": "State is right, but results the user needed were never retrieved.",
    "spurious_tool_call": "The turn needed no call (or could not be done) and the agent acted.",
    "empty_turn_model_response": "BFCL tag: no call on a turn whose ground truth has calls.",
    "instance_mismatch": "BFCL tag: backend instance state differs from the ground truth's.",
    "checker_error": "The verifier itself failed on this turn.",
    "gt_error": "The reference solution of this turn is invalid.",
    "unverified": "No per-turn evidence and no error; nothing supports a failure label.",
}

SUCCESS_LABELS = frozenset({"pass", "correct_abstention"})
UNTRUSTED_LABELS = frozenset({"checker_error", "gt_error"})
FAILURE_LABELS = frozenset(LABELS) - SUCCESS_LABELS - UNTRUSTED_LABELS - {"unverified"}
