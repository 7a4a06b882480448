"""A LangChain chat model over any OpenAI-compatible endpoint, built to feed training.

`ServedChatModel` is langchain-openai's `ChatOpenAI` with three additions:

* retries on connection errors, timeouts and 5xx answers are owned by tenacity (the
  OpenAI SDK's own retries are switched off, so there is one retry policy, and it logs),
  and end within the retry budget; a server that stays unreachable, or refuses the key,
  fails with a `ServerError` that names the server's URL and what to do;
* with `return_token_ids=True` it asks vLLM for the token ids it actually generated
  (`return_token_ids`) and their logprobs, and puts them on the message's
  `response_metadata` — training later uses exactly the served tokens, so there is no
  re-tokenisation drift between what was sampled and what is trained;
* the `served_tokens()` helper reads them back in one typed object.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import openai
from langchain_core.messages import BaseMessage, InvalidToolCall
from langchain_core.messages.tool import invalid_tool_call
from langchain_core.outputs import ChatResult
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field
from tenacity import (
    AsyncRetrying,
    Retrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential,
)

from seal_graph.errors import ServerError

logger = logging.getLogger(__name__)
RETRY_BUDGET_ENV = "SEAL_GRAPH_RETRY_BUDGET_S"


class ServedTokens(BaseModel):
    """The exact tokens behind one completion, as the server produced them."""

    prompt_token_ids: list[int] = Field(description="Token ids of the rendered prompt.")
    completion_token_ids: list[int] = Field(description="Token ids the server sampled.")
    completion_logprobs: list[float] = Field(
        description="Logprob of each sampled token under the serving policy."
    )
    served_version: str | None = Field(
        default=None,
        description="The weights that answered (the server's `X-Seal-Policy-Version` "
        "header; None from a server without a policy card).",
    )


def is_retryable(exc: BaseException) -> bool:
    """Connection failures, timeouts and 5xx are transient; anything else is not.

    langchain-openai re-raises SDK errors as its own subclasses, so the cause chain is
    walked too.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, openai.APIConnectionError):  # includes APITimeoutError
            return True
        if isinstance(seen, openai.APIStatusError) and seen.status_code >= 500:
            return True
        seen = seen.__cause__
    return False


class ServedChatModel(ChatOpenAI):
    """`ChatOpenAI` with tenacity retries and, optionally, the served token ids."""

    return_token_ids: bool = Field(
        default=False,
        description="Ask the server (vLLM) for prompt/completion token ids and logprobs.",
    )
    retry_attempts: int = Field(default=30, ge=1, description="Attempts per request.")
    retry_max_wait_s: float = Field(default=10.0, gt=0, description="Longest backoff wait.")
    retry_budget_s: float = Field(
        default_factory=lambda: float(os.environ.get(RETRY_BUDGET_ENV, 180)),
        gt=0,
        description="Give up retrying after this long: long enough for a supervised server "
        f"to restart (20-100 s on CPU). Default from ${RETRY_BUDGET_ENV}, else 180 s.",
    )

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_retries", 0)  # tenacity owns retries
        if kwargs.get("return_token_ids"):
            kwargs["logprobs"] = True
            kwargs["include_response_headers"] = True  # the policy version that answered
            kwargs["extra_body"] = {**(kwargs.get("extra_body") or {}), "return_token_ids": True}
        super().__init__(**kwargs)

    def _retry_kwargs(self) -> dict[str, Any]:
        return {
            "retry": retry_if_exception(is_retryable),
            # no wait that would end past the budget: the budget is the most a call waits
            "stop": stop_after_attempt(self.retry_attempts)
            | stop_before_delay(self.retry_budget_s),
            "wait": wait_exponential(multiplier=0.5, max=self.retry_max_wait_s),
            "before_sleep": before_sleep_log(logger, logging.WARNING),
            "reraise": True,
        }

    def explain(self, exc: BaseException) -> ServerError | None:
        """A refused key or a server that stayed unreachable as a `ServerError` naming
        the URL; None for any other error (the model's, or a bad request)."""
        url = self.openai_api_base
        seen: BaseException | None = exc
        while seen is not None and not isinstance(seen, openai.APIError):
            seen = seen.__cause__
        if isinstance(seen, openai.AuthenticationError):
            return ServerError(
                f"the server at {url} refused the API key (HTTP 401): use the key it was "
                "started with (`seal-graph serve` prints it as SEAL_GRAPH_API_KEY)."
            )
        if is_retryable(exc):
            return ServerError(
                f"the server at {url} did not answer within the retry budget of "
                f"{self.retry_budget_s:.0f} s (${RETRY_BUDGET_ENV}): {type(seen or exc).__name__}"
                f": {seen or exc}. Check that it runs and that the URL is right."
            )
        return None

    def _raise_explained(self, exc: Exception) -> None:
        explained = self.explain(exc)
        if explained is not None:
            raise explained from exc

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        try:
            for attempt in Retrying(**self._retry_kwargs()):
                with attempt:
                    return super()._generate(messages, *args, **kwargs)
        except Exception as exc:
            self._raise_explained(exc)
            raise
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def _agenerate(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> ChatResult:
        try:
            async for attempt in AsyncRetrying(**self._retry_kwargs()):
                with attempt:
                    return await super()._agenerate(messages, *args, **kwargs)
        except Exception as exc:
            self._raise_explained(exc)
            raise
        raise AssertionError("unreachable: tenacity re-raises the last error")

    def _create_chat_result(
        self, response: dict | openai.BaseModel, generation_info: dict | None = None
    ) -> ChatResult:
        response, refused = _set_aside_non_object_calls(response)
        result = super()._create_chat_result(response, generation_info)
        for generation, calls in zip(result.generations, refused, strict=True):
            generation.message.invalid_tool_calls += calls  # type: ignore[attr-defined]
        if not self.return_token_ids:
            return result
        from seal_graph.serving.policy_card import HEADER  # serving imports this module

        raw = response if isinstance(response, dict) else response.model_dump(warnings=False)
        prompt_ids = raw.get("prompt_token_ids") or []
        headers = {k.lower(): v for k, v in ((generation_info or {}).get("headers") or {}).items()}
        for generation, choice in zip(result.generations, raw["choices"], strict=True):
            content = (choice.get("logprobs") or {}).get("content") or []
            generation.message.response_metadata["served_tokens"] = ServedTokens(
                prompt_token_ids=prompt_ids,
                completion_token_ids=choice.get("token_ids") or [],
                completion_logprobs=[entry["logprob"] for entry in content],
                served_version=headers.get(HEADER.lower()),
            ).model_dump()
        return result


def _set_aside_non_object_calls(
    response: dict | openai.BaseModel,
) -> tuple[dict | openai.BaseModel, list[list[InvalidToolCall]]]:
    """Tool calls whose arguments parse to JSON that is not an object (`[true]`, `3`):
    langchain-core raises building the message from them, which would fail the whole
    request (and a batch that allows no exceptions). They are taken out of the response
    and become the message's `invalid_tool_calls`, which the rollout records as the
    agent's parse errors, as for arguments that are not JSON at all."""
    raw = response if isinstance(response, dict) else response.model_dump(warnings=False)
    refused: list[list[InvalidToolCall]] = []
    changed = False
    for choice in raw.get("choices") or []:
        kept, set_aside = [], []
        for call in (choice.get("message") or {}).get("tool_calls") or []:
            function = call.get("function") or {}
            try:
                args = json.loads(function.get("arguments") or "{}", strict=False)
            except ValueError:
                args = {}  # not JSON: LangChain records it as an invalid call itself
            if isinstance(args, dict):
                kept.append(call)
                continue
            set_aside.append(
                invalid_tool_call(
                    name=function.get("name"),
                    args=function.get("arguments"),
                    id=call.get("id"),
                    error="the arguments are not a JSON object",
                )
            )
        refused.append(set_aside)
        if set_aside:
            choice["message"]["tool_calls"] = kept or None
            changed = True
    return (raw if changed else response), refused


def served_tokens(message: BaseMessage) -> ServedTokens | None:
    """The served token ids of a message produced with `return_token_ids=True`."""
    data = message.response_metadata.get("served_tokens")
    return ServedTokens.model_validate(data) if data else None
