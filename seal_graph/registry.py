"""Environments by name, and one cached chat model per endpoint setting.

Graph nodes receive plain, serialisable settings (an env name, a base URL) so the same
graph runs from Python, from the CLI and in LangGraph Studio; this module turns those
settings into live objects once per process.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
import weakref
from functools import cache
from typing import Any

import httpx

from seal_graph.client import ServedChatModel
from seal_graph.environment import Environment, Task
from seal_graph.errors import ConfigError
from seal_graph.records import Episode
from seal_graph.settings import JudgeSettings

BUILTIN_ENVIRONMENTS = {
    "kv-calc": "seal_graph.tools.kv_calc:make_env",
    "bfcl": "seal_graph.tools.bfcl.env:make_env",
    "bfcl-strict": "seal_graph.tools.bfcl.env:make_strict_env",
}


_REGISTERED: dict[str, Environment] = {}


def register_environment(env: Environment) -> str:
    """Make an environment object reachable by its name (graphs take names, so that the
    same graph runs from Studio); returns the name."""
    _REGISTERED[env.name] = env
    return env.name


def get_environment(name: str) -> Environment:
    """A registered environment, a built-in one (`kv-calc`, `bfcl`) or `module:factory`
    (importable from the current directory too). A loaded environment is registered
    under its own `.name` as well: episodes, graphs and the training loop refer to it by
    that name later."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    env = _load_environment(name)
    _REGISTERED.setdefault(env.name, env)
    return env


def import_object(spec: str, what: str) -> Any:
    """The object `package.module:name` names (importable from the current directory too:
    `myenv:make_env` from the folder it lives in)."""
    if ":" not in spec:
        raise ConfigError(f"{what} {spec!r}: name it as 'package.module:name'")
    module_name, name = spec.split(":", 1)
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what} {spec!r}: cannot import {module_name} ({exc})") from exc
    if not hasattr(module, name):
        raise ConfigError(f"{what} {spec!r}: {module_name} has no {name}")
    return getattr(module, name)


@cache
def _load_environment(name: str) -> Environment:
    target = BUILTIN_ENVIRONMENTS.get(name, name)
    if ":" not in target:
        raise ConfigError(
            f"unknown environment {name!r}. Built in: {', '.join(BUILTIN_ENVIRONMENTS)}; "
            "or name your own as 'package.module:factory'."
        )
    return import_object(target, "environment")()


def agent_factory(spec: str) -> Any:
    """The user's agent factory named `package.module:factory` (`train --agent`): called
    with (chat model, tools), it returns the agent (`seal_graph.runners.own_agent`)."""
    factory = import_object(spec, "agent")
    if not callable(factory):
        raise ConfigError(f"agent {spec!r} is not callable: name a factory of (model, tools)")
    return factory


def resolve_environment(env: str | Environment) -> Environment:
    """An environment from a name, or an object (which gets registered under its name)."""
    if isinstance(env, Environment):
        register_environment(env)
        return env
    return get_environment(env)


_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, ServedChatModel]] = (
    weakref.WeakKeyDictionary()
)


def chat_model(
    base_url: str, api_key: str, model: str, temperature: float, max_tokens: int
) -> ServedChatModel:
    """One client per endpoint setting and event loop, shared by that loop's rollouts
    (connection pooling). Async HTTP clients are bound to the loop that created them, so
    a client is never reused across `asyncio.run` calls."""
    key = (base_url, api_key, model, temperature, max_tokens)
    try:
        per_loop = _CLIENTS.setdefault(asyncio.get_running_loop(), {})
    except RuntimeError:  # called outside an event loop: nothing to share
        per_loop = {}
    if key not in per_loop:
        per_loop[key] = ServedChatModel(
            model=model,
            base_url=base_url,
            api_key=api_key,
            temperature=temperature,
            max_tokens=max_tokens,
            return_token_ids=True,
            timeout=300.0,
            # langchain-openai shares one default async HTTP client per base URL across
            # the process; ours belongs to this loop only.
            http_async_client=httpx.AsyncClient(timeout=300.0),
        )
    return per_loop[key]


def task_of(episode: Episode) -> Task | None:
    """The task an episode ran, from its environment by name; None when the environment
    is not known in this process (diagnosis then goes without a reference solution)."""
    try:
        return get_environment(episode.env).task(episode.task_id)
    except ConfigError:
        return None


def environment_of(episodes: list[Episode]) -> Environment | None:
    """The environment a batch ran in; None when it is not known in this process
    (diagnosis and evolution then use their defaults: no references, built-in hints)."""
    try:
        return get_environment(episodes[0].env) if episodes else None
    except ConfigError:
        return None


def judge_model(settings: JudgeSettings) -> ServedChatModel | None:
    """The judge's chat model (greedy), or None when no judge is configured."""
    if not settings.enabled:
        return None
    return chat_model(settings.base_url, settings.api_key, settings.model, 0.0, 256)
