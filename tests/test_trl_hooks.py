"""The private TRL hooks seal-graph overrides or calls, pinned.

`TraceGRPOTrainer` (training/grpo.py) and `TrajectoryDPOTrainer` / `AgentTokenCollator`
(training/dpo.py) replace or call TRL internals. A TRL release that changes one of these
signatures, or the batch keys `GRPOTrainer._compute_loss` reads, must fail here, loudly,
rather than train on a silently wrong batch: re-read the new TRL source, adapt the
override, then update the pins below.
"""

from __future__ import annotations

import inspect
import re

import pytest

trl = pytest.importorskip("trl")

from trl import DPOTrainer, GRPOTrainer  # noqa: E402
from trl.trainer.dpo_trainer import DataCollatorForPreference  # noqa: E402

PINNED_SIGNATURES = {
    (GRPOTrainer, "_generate_and_score_completions"): ["self", "inputs"],
    (GRPOTrainer, "_get_train_sampler"): ["self", "dataset"],
    (GRPOTrainer, "create_optimizer"): ["self", "model"],
    (GRPOTrainer, "_get_per_token_logps_and_entropies"): [
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
        "compute_entropy",
        "compute_aux_loss",
    ],
    (GRPOTrainer, "_compute_loss"): ["self", "model", "inputs"],
    (DPOTrainer, "_prepare_dataset"): [
        "self",
        "dataset",
        "processing_class",
        "args",
        "dataset_name",
    ],
    (DataCollatorForPreference, "torch_call"): ["self", "examples"],
}

#: Every key `_compute_loss` reads from the batch (`inputs[...]` or `inputs.get(...)`).
#: Ours: the first group is what `TraceGRPOTrainer._generate_and_score_completions`
#: builds; the rest are optional (multimodal, tool masks, IS ratios) and absent.
COMPUTE_LOSS_KEYS = {
    "prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages",
    "old_per_token_logps", "num_items_in_batch", "ref_per_token_logps",
} | {
    "image_grid_thw", "image_position_ids", "image_sizes", "importance_sampling_ratio",
    "mm_token_type_ids", "num_images", "num_tiles", "pixel_attention_mask", "pixel_values",
    "sampling_per_token_logps", "spatial_shapes", "token_type_ids", "tool_mask",
}  # fmt: skip


@pytest.mark.parametrize(("owner", "name"), list(PINNED_SIGNATURES), ids=lambda v: str(v))
def test_overridden_trl_hooks_keep_their_signatures(owner, name) -> None:
    parameters = inspect.signature(getattr(owner, name)).parameters
    pinned = PINNED_SIGNATURES[owner, name]
    assert list(parameters)[: len(pinned)] == pinned
    added = [p for p in list(parameters)[len(pinned) :]]
    # parameters TRL adds after ours must be optional, or our calls break
    assert all(parameters[p].default is not inspect.Parameter.empty for p in added), added


def test_compute_loss_reads_the_batch_keys_we_build() -> None:
    source = inspect.getsource(GRPOTrainer._compute_loss)
    read = set(re.findall(r'inputs(?:\[|\.get\()"(\w+)"', source))
    assert read == COMPUTE_LOSS_KEYS


def test_compute_loss_reads_the_advantages_after_its_forward() -> None:
    """A single-step GRPO batch gets its importance weights from the loss's own forward
    (`TraceGRPOTrainer._compute_loss`): TRL must read the advantages after it, and take
    the behaviour logprobs from that forward when the batch has none."""
    source = inspect.getsource(GRPOTrainer._compute_loss)
    forward = source.index("self._get_per_token_logps_and_entropies(")
    assert forward < source.index('inputs["advantages"]')
    assert "per_token_logps.detach() if old_per_token_logps is None" in source


def test_dpo_trainer_still_honours_precomputed_reference_logps() -> None:
    source = inspect.getsource(DPOTrainer)
    assert "precompute_ref_logps" in source
    assert "ref_chosen_logps" in source and "ref_rejected_logps" in source
