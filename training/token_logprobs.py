"""Log-probabilities of chosen tokens from LM-head logits, a bounded chunk at a time.

The GRPO step scores only the positions that predict the agent's tokens (the model's
`logits_to_keep` takes their indices), so no forward holds full-vocabulary logits for a
whole episode. What is left is the log-softmax over those positions: in float32 it is
twice the size of bf16 logits, and autograd would keep that copy for the backward pass.
Each chunk is recomputed in the backward pass instead (`torch.utils.checkpoint`), so
only the logits themselves stay alive between the forward and the loss.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

CHUNK_POSITIONS = 64
"""Positions per chunk: 64 x a 49k vocabulary is 12.6 MB of float32 at a time."""


def chosen_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logprob of `targets[i]` under `logits[i] / temperature` (float32), and each
    position's entropy when asked (a statistic: no gradient flows through it)."""
    chosen, entropies = [], []
    for rows, tokens in zip(
        logits.split(CHUNK_POSITIONS), targets.split(CHUNK_POSITIONS), strict=True
    ):
        if rows.requires_grad:
            lp = checkpoint(_chosen, rows, tokens, temperature, use_reentrant=False)
        else:
            lp = _chosen(rows, tokens, temperature)
        chosen.append(lp)
        if entropy:
            with torch.no_grad():
                entropies.append(_entropy(rows, temperature))
    return torch.cat(chosen), torch.cat(entropies) if entropy else None


def _chosen(rows: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    scaled = rows.float() / temperature
    return scaled.gather(-1, tokens[:, None])[:, 0] - scaled.logsumexp(-1)


def _entropy(rows: torch.Tensor, temperature: float) -> torch.Tensor:
    logp = torch.log_softmax(rows.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)
