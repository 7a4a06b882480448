"""Whole trajectories as token sequences with a mask on the agent's own tokens.

Trajectory-level preference learning (ETO, the co-evolving failure agent) scores a whole
multi-turn episode: the sum of the log-probabilities of the tokens the agent produced.
Tool results and later user turns are context, not actions, so they are masked out.
The mask comes from rendering the conversation prefix by prefix with the tokenizer's
chat template: an assistant message's tokens are those between the prompt rendered up
to it (with the generation prompt) and the prompt rendered through it. The template
must render a prefix as a prefix of the whole; this is checked, not assumed.
"""

from __future__ import annotations

from typing import Any

from seal_graph.errors import SealGraphError


class TemplateError(SealGraphError):
    """The chat template does not render conversation prefixes consistently."""


def agent_steps(messages: list[dict[str, Any]]) -> int:
    """Assistant messages (agent steps) in a conversation."""
    return sum(m["role"] == "assistant" for m in messages)


def truncate_steps(messages: list[dict[str, Any]], steps: int) -> list[dict[str, Any]]:
    """The conversation through its `steps`-th assistant message, with the tool results
    that answered it (ETO truncates a rejected trajectory to the chosen length + 5)."""
    seen = 0
    for index, message in enumerate(messages):
        if message["role"] == "assistant":
            seen += 1
            if seen > steps:
                return messages[:index]
    return list(messages)


def _render(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict], gen: bool) -> list:
    ids = tokenizer.apply_chat_template(
        messages, tools=tools or None, add_generation_prompt=gen, tokenize=True
    )
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def tokenize_trajectory(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict], prompt_messages: int
) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, continuation ids, continuation mask): the prompt is the first
    `prompt_messages` messages with the generation prompt; the mask is 1 on the tokens
    of assistant messages after it."""
    prompt = _render(tokenizer, messages[:prompt_messages], tools, gen=True)
    full = _render(tokenizer, messages, tools, gen=False)
    if full[: len(prompt)] != prompt:
        raise TemplateError(
            "the chat template renders the prompt differently inside the whole trajectory; "
            "use a template whose prefixes are stable (the bundled hermes_tools.jinja is)"
        )
    mask = [0] * len(full)
    for index in range(prompt_messages, len(messages)):
        if messages[index]["role"] != "assistant":
            continue
        start = len(_render(tokenizer, messages[:index], tools, gen=True))
        end = len(_render(tokenizer, messages[: index + 1], tools, gen=False))
        mask[start:end] = [1] * (end - start)
    return prompt, full[len(prompt) :], mask[len(prompt) :]
