"""The trainer's side of the swap probe on the bundled model: its greedy answer and that
answer's scores come from generation's own forward passes, and they are what a separate
scoring forward of the same tokens gives."""

from __future__ import annotations

import torch

from seal_graph.bundled_model import ensure_bundled_model
from seal_graph.training.policy import Policy
from seal_graph.training.settings import LoraSettings


def test_greedy_answer_scores_as_a_separate_forward_does() -> None:
    policy = Policy(ensure_bundled_model(), LoraSettings(r=4, alpha=8))
    prompt = policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3? Answer with a number."}],
        add_generation_prompt=True,
    )
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    answer, logprobs, ranked, alternatives = policy.greedy_answer(prompt, 3, k=2)
    rows = policy._logprob_rows(prompt, answer)
    assert rows.argmax(-1).tolist() == answer  # greedy: each token the likeliest
    assert torch.allclose(
        torch.tensor(logprobs), rows.gather(1, torch.tensor(answer)[:, None])[:, 0], atol=1e-4
    )
    assert 2 <= len(ranked) <= 6 and len(set(ranked)) == len(ranked)
    assert torch.allclose(torch.tensor(alternatives), rows[:, ranked], atol=1e-4)
    top = rows[0].topk(3).indices.tolist()
    assert [t for t in top if t != answer[0]][:2] == ranked[:2]  # the first position's runners-up
