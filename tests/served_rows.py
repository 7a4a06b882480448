"""Training samples as the loop builds them from served calls, for the GRPO tests on the
bundled model: one call per answer, the policy's own logprobs standing for the server's."""

from __future__ import annotations

from seal_graph.records import TrainingSample
from seal_graph.training.policy import Policy


def served_rows(
    policy: Policy, answers: list[str], advantages: list[float]
) -> list[TrainingSample]:
    """Answer i to the chat prompt "task i", with advantage i."""
    rows = []
    for i, (answer, advantage) in enumerate(zip(answers, advantages, strict=True)):
        prompt = policy.tokenizer.apply_chat_template(
            [{"role": "user", "content": f"task {i}"}], add_generation_prompt=True
        )
        prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
        completion = policy.tokenizer(answer, add_special_tokens=False)["input_ids"]
        rows.append(
            TrainingSample(
                prompt_token_ids=prompt,
                completion_token_ids=completion,
                completion_logprobs=policy.completion_logprobs(prompt, completion),
                agent_mask=[1] * len(completion),
                advantage=advantage,
            )
        )
    return rows
