"""One error hierarchy for seal-graph.

The model's mistakes are data (labelled turns), never exceptions. What raises is what a
person has to fix: bad configuration or input, a model server that will not start or
answer, a broken installation. Every message says what went wrong and what to do.
"""

from __future__ import annotations


class SealGraphError(Exception):
    """Base class of every error seal-graph raises on purpose; the CLI prints these
    without a traceback and exits non-zero."""


class ConfigError(SealGraphError, ValueError):
    """Invalid user input: a bad option, a missing file, an unknown model path.

    Also a `ValueError`: the LangGraph API server (Studio) shows a ValueError's message
    to the client and replaces other exceptions' messages with a generic one."""


class InstallError(SealGraphError):
    """A dependency is missing or broken; the message names the install command."""


class ServerError(SealGraphError, RuntimeError):
    """The model server could not be started, reached or authenticated.

    Also a `RuntimeError`, for the same reason `ConfigError` is a `ValueError`: the
    LangGraph API server passes its message on to the client."""


class ServerStartError(ServerError):
    """A server we launched exited or never became healthy; carries its last log lines."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        self.log_tail = log_tail
        super().__init__(
            f"{message}\n--- last lines of the server log ---\n{log_tail}" if log_tail else message
        )


class StoreError(SealGraphError):
    """The trace store could not be written (locked, disk full); committed data is intact."""
