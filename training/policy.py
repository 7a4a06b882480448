"""The trainable policy: the served checkpoint plus a LoRA adapter (PEFT), kept in memory
across loop iterations, and what the server needs to serve it."""

from __future__ import annotations

import contextlib
import copy
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch
from peft import (
    LoraConfig,
    PeftModel,
    get_peft_model,
    get_peft_model_state_dict,
    set_peft_model_state_dict,
)
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from seal_graph.training.settings import LoraSettings

#: The frozen adapter the GRPO KL term reads, when the policy has one (`keep_reference`).
REFERENCE = "reference"
ADAPTER_FILE = "adapter_model.safetensors"


class Policy:
    """Base model + LoRA adapter; `version` counts optimiser steps taken."""

    def __init__(self, base_dir: Path, lora: LoraSettings, dtype: torch.dtype = torch.float32):
        self.base_dir = Path(base_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(self.base_dir)
        base: PreTrainedModel = AutoModelForCausalLM.from_pretrained(self.base_dir, dtype=dtype)
        config = LoraConfig(
            r=lora.r,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=lora.target_modules,
            task_type="CAUSAL_LM",
        )
        self.model: PeftModel = get_peft_model(base, config)
        self.version = 0

    @property
    def name(self) -> str:
        return f"step-{self.version}"

    def load_adapter(self, adapter_dir: Path) -> None:
        """Put the weights of an adapter `save_adapter` wrote into the model (in place:
        the optimiser's references to the parameters stay valid)."""
        weights = load_file(str(Path(adapter_dir) / ADAPTER_FILE))
        set_peft_model_state_dict(self.model, weights)

    def keep_reference(self, adapter_dir: Path | None = None) -> None:
        """Freeze the adapter as it is now (or as `adapter_dir` holds it) as the KL
        reference. TRL's reference for a PEFT model is the adapter switched off: the model
        before any training. After a warm start, RL starts from the warm start, and a KL
        term toward the untrained model would pull the policy back past it."""
        if adapter_dir is None:
            weights = get_peft_model_state_dict(self.model)
        else:
            weights = load_file(str(Path(adapter_dir) / ADAPTER_FILE))
        if REFERENCE not in self.model.peft_config:
            self.model.add_adapter(REFERENCE, copy.deepcopy(self.model.peft_config["default"]))
        set_peft_model_state_dict(self.model, weights, adapter_name=REFERENCE)
        for name, parameter in self.model.named_parameters():
            if f".{REFERENCE}." in name:
                parameter.requires_grad_(False)

    def save_reference(self, target: Path) -> Path | None:
        """Write the kept reference's weights (`ADAPTER_FILE` in `target`); None if none."""
        if REFERENCE not in self.model.peft_config:
            return None
        target.mkdir(parents=True, exist_ok=True)
        weights = get_peft_model_state_dict(self.model, adapter_name=REFERENCE)
        save_file({k: v.contiguous() for k, v in weights.items()}, str(target / ADAPTER_FILE))
        return target

    def save_adapter(self, target: Path) -> Path:
        """Write the adapter (PEFT format vLLM loads) atomically to `target`."""
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        self.model.save_pretrained(staging, selected_adapters=["default"])
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
        return target

    def save_merged(self, target: Path) -> Path:
        """Write base + adapter merged into one full checkpoint (for in-place reload)."""
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        with torch.no_grad():
            full = copy.deepcopy(self.model).merge_and_unload()  # the trained model stays
        full.save_pretrained(staging)
        self.tokenizer.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
        return target

    @torch.no_grad()
    def greedy(self, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
        """The policy's greedy continuation of a prompt (token ids)."""
        return self.greedy_answer(prompt_ids, max_new_tokens, k=0)[0]

    @torch.no_grad()
    def _logprob_rows(self, prompt_ids: list[int], completion_ids: list[int]) -> torch.Tensor:
        """Log-softmax over the vocabulary at each completion position (adapter on)."""
        self.model.eval()
        ids = torch.tensor([prompt_ids + completion_ids])
        logits = self.model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
        return torch.log_softmax(logits, dim=-1)

    def completion_logprobs(self, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
        """Logprob of each completion token under the current policy (adapter on)."""
        return _chosen(self._logprob_rows(prompt_ids, completion_ids), completion_ids)

    @torch.no_grad()
    def greedy_answer(
        self, prompt_ids: list[int], max_new_tokens: int, k: int
    ) -> tuple[list[int], list[float], list[int], list[list[float]]]:
        """The policy's greedy continuation of a prompt and, from the same forward passes,
        each token's logprob, the `k` likeliest tokens after each one's own (over all
        positions, without repeats) and every position's logprobs of them: the swap
        probe's reference answer and its most weight-sensitive tokens
        (`seal_graph.training.weight_sync.reference_probe`)."""
        self.model.eval()
        ids = torch.tensor([prompt_ids])
        out = self.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        answer = out.sequences[0, len(prompt_ids) :].tolist()
        rows = torch.log_softmax(torch.cat(out.logits).float(), dim=-1)  # a row per token
        ranked: list[int] = []
        for row, token in zip(rows, answer, strict=True):
            others = [t for t in row.topk(k + 1).indices.tolist() if t != token]
            ranked += [t for t in others[:k] if t not in ranked]
        alternatives = rows[:, ranked].tolist() if ranked else []
        return answer, _chosen(rows, answer), ranked, alternatives


def _chosen(rows: torch.Tensor, completion_ids: list[int]) -> list[float]:
    """Each position's logprob of the token that was actually there."""
    return rows.gather(1, torch.tensor(completion_ids)[:, None])[:, 0].tolist()


@contextlib.contextmanager
def reference_weights(model: PeftModel) -> Iterator[None]:
    """The GRPO KL reference in place for the forwards inside: the kept reference adapter
    (`Policy.keep_reference`), else the adapter switched off (TRL's PEFT reference)."""
    if REFERENCE not in model.peft_config:
        with model.disable_adapter():
            yield
        return
    active = model.active_adapter
    model.set_adapter(REFERENCE, inference_mode=True)
    try:
        yield
    finally:
        model.set_adapter(active)  # trainable again, the reference frozen
