"""Settings shared across entry points: how episodes are sampled, and the optional judge.

`RolloutSettings` is one type for every place that rolls out: the batch runner
(`seal_graph.runners.rollouts.run_rollouts`), the rollout graph's context (and so LangGraph
Studio), evaluation and the training loop's `[rollout]` section all take it whole, so a
setting has one name, one default and one description everywhere.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

API_KEY_ENV = "SEAL_GRAPH_API_KEY"
"""The environment variable that holds a model server's key by default."""


def api_key_field(what: str) -> Any:
    """A setting that names the environment variable holding `what`'s API key. Settings
    travel into graph contexts, run records and Studio, so they hold a secret's name,
    never the secret."""
    return Field(
        default=API_KEY_ENV,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description=f"Name of the environment variable (of the process that runs the graph) "
        f"that holds the API key of {what}; the key itself is never part of a setting, a "
        f"run or a graph's state. Default ${API_KEY_ENV}, then $OPENAI_API_KEY.",
    )


def api_key_from_environment(variable: str) -> str:
    """The key in environment variable `variable`; for the default variable, falls back
    to $OPENAI_API_KEY (what `seal-graph serve` exports for any OpenAI client)."""
    key = os.environ.get(variable, "")
    if not key and variable == API_KEY_ENV:
        key = os.environ.get("OPENAI_API_KEY", "")
    return key


class RolloutSettings(BaseModel):
    """Sampling settings of each episode, and how many run at once."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(
        default=1.0, ge=0, description="Sampling temperature (0 = greedy, as in evaluation)."
    )
    max_tokens: int = Field(default=256, ge=1, description="Completion token limit per agent step.")
    step_limit: int = Field(
        default=20, ge=1, description="Agent steps per user turn before the turn is cut."
    )
    group_size: int = Field(
        default=1, ge=1, description="Episodes per task (a GRPO group: same task, same policy)."
    )
    concurrency: int = Field(default=8, ge=1, description="Episodes in flight at once.")
    stop_at_failed_turn: bool = Field(
        default=False,
        description="End an episode at the first turn the environment reports failed "
        "(evaluation: success needs every turn, so the rest cannot change it; training runs "
        "every turn, so each gets a label).",
    )

    def greedy(self, max_tokens: int | None = None) -> RolloutSettings:
        """The same settings for evaluation: temperature 0, one episode per task, each
        stopped at its first failed turn."""
        fields = {name: getattr(self, name) for name in RolloutSettings.model_fields}
        fields.update(temperature=0.0, group_size=1, stop_at_failed_turn=True)
        if max_tokens is not None:
            fields["max_tokens"] = max_tokens
        return RolloutSettings(**fields)


class JudgeSettings(BaseModel):
    """An optional LLM judge for turns no executable evidence can label (`unverified`)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(
        default="", description="OpenAI-compatible endpoint of the judge; empty = no judge."
    )
    model: str = Field(default="", description="Model name of the judge.")
    api_key_env: str = api_key_field("the judge's endpoint")

    @property
    def api_key(self) -> str:
        """The judge endpoint's key, read from the environment when it is needed."""
        return api_key_from_environment(self.api_key_env)

    @property
    def enabled(self) -> bool:
        return bool(self.base_url and self.model)
