"""Whole trajectories as token sequences with a mask on the agent's own tokens.

One record, `TokenTrajectory`, from two sources; GRPO, the SFT warm start and DPO all train
on it, one sequence per episode, so a shared prompt is forwarded once instead of once
per agent step.

`served_trajectory` takes an episode's served token ids as they are (GRPO): the last
call's prompt + completion is the whole episode when every call's prompt + completion
is a prefix of the next call's prompt (checked per episode; where the server's template
re-tokenised earlier text differently, there is no such sequence and the caller falls
back to per-call samples).

`rendered_trajectory` renders a conversation with the chat template (the warm start's
reference solutions were never served; DPO pairs). Tool results and later user turns
are context, not actions, so they are masked out: an assistant message's tokens are
those between the conversation rendered up to it (with the generation prompt) and
rendered through it. The template must render a prefix as a prefix of the whole; this
is checked, not assumed.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from seal_graph.errors import SealGraphError
from seal_graph.records import Episode, LLMCall


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


class TokenTrajectory(BaseModel):
    """An episode as one token sequence with the agent's own tokens marked.

    GRPO, the SFT warm start and DPO all train on this: one sequence per episode, the
    loss on `agent_mask` tokens only.
    """

    token_ids: list[int]
    prompt_length: int
    """The first call's prompt: context every agent step shares."""
    agent_mask: list[int]
    """1 on tokens the agent produced (served: sampled; rendered: assistant messages)."""
    logprobs: list[float] = []
    """Served trajectories: the served logprob of each agent token, 0 elsewhere."""
    turns: list[int] = []
    """Served trajectories: the user turn of each agent token, -1 elsewhere."""
    calls: int
    """Agent steps (LLM calls or assistant messages) in the sequence."""
    respliced: int = 0
    """Served: agent messages the next prompt re-rendered with other tokens (kept as
    sampled)."""

    @property
    def prompt_ids(self) -> list[int]:
        return self.token_ids[: self.prompt_length]

    @property
    def continuation_ids(self) -> list[int]:
        return self.token_ids[self.prompt_length :]

    @property
    def continuation_mask(self) -> list[int]:
        return self.agent_mask[self.prompt_length :]


def rendered_trajectory(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict], prompt_messages: int
) -> TokenTrajectory:
    """A conversation rendered with the chat template: the prompt is the first
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
        span = full[start:end]
        if tokenizer.eos_token_id in span:  # the separator the template adds after the
            end = start + len(span) - span[::-1].index(tokenizer.eos_token_id)  # agent's
        mask[start:end] = [1] * (end - start)  # end-of-turn token is not the agent's
    return TokenTrajectory(
        token_ids=full,
        prompt_length=len(prompt),
        agent_mask=mask,
        calls=agent_steps(messages[prompt_messages:]),
    )


def served_trajectory(episode: Episode, end_of_turn: int | None = None) -> TokenTrajectory | None:
    """The episode's served calls as one sequence: the first call's prompt, then each
    call's sampled completion and what the next prompt added after it (tool results,
    the next user turn, the generation prompt).

    Where the next prompt re-renders the agent's message with other tokens (the same
    tool call re-serialised, e.g. `"a" ,` as `"a",`), the sampled tokens are kept and only
    what follows the re-rendered message (from its `end_of_turn` token on) is appended:
    the sequence is then what the agent produced, with later agent tokens scored in a
    context that differs from the served one by that re-rendering (the GRPO step's
    importance weights correct for the difference). None when that is not possible
    (no call served, an earlier prompt not kept as the next prompt's prefix, a message
    that did not end its turn): the caller falls back to per-call samples."""
    calls = [c for c in episode.llm_calls if c.completion_token_ids]
    if not calls or any(not c.prompt_token_ids for c in calls):
        return None
    token_ids = list(calls[0].prompt_token_ids)
    agent_mask, logprobs, turns = (
        [0] * len(token_ids),
        [0.0] * len(token_ids),
        [-1] * len(token_ids),
    )
    respliced = 0
    for index, call in enumerate(calls):
        if index:
            added = _added_context(calls[index - 1], call, end_of_turn)
            if added is None:
                return None
            context, resplice = added
            respliced += resplice
            token_ids += context
            agent_mask += [0] * len(context)
            logprobs += [0.0] * len(context)
            turns += [-1] * len(context)
        scored = len(call.completion_logprobs)  # a token without a served logprob is
        missing = len(call.completion_token_ids) - scored  # context, not trained on
        token_ids += call.completion_token_ids
        agent_mask += [1] * scored + [0] * missing
        logprobs += list(call.completion_logprobs) + [0.0] * missing
        turns += [call.turn] * scored + [-1] * missing
    return TokenTrajectory(
        token_ids=token_ids,
        prompt_length=len(calls[0].prompt_token_ids),
        agent_mask=agent_mask,
        logprobs=logprobs,
        turns=turns,
        calls=len(calls),
        respliced=respliced,
    )


def _added_context(
    previous: LLMCall, call: LLMCall, end_of_turn: int | None
) -> tuple[list[int], bool] | None:
    """What `call`'s prompt added after `previous`'s completion, and whether the agent's
    message had to be re-spliced (see `served_trajectory`)."""
    served = previous.prompt_token_ids + previous.completion_token_ids
    prompt = call.prompt_token_ids
    if prompt[: len(served)] == served:
        return prompt[len(served) :], False
    start = len(previous.prompt_token_ids)
    if (
        end_of_turn is None
        or prompt[:start] != previous.prompt_token_ids
        or previous.completion_token_ids[-1] != end_of_turn
        or end_of_turn not in prompt[start:]
    ):
        return None
    return prompt[prompt.index(end_of_turn, start) + 1 :], True
