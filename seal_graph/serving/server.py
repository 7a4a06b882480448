"""Start, health-check and stop a vLLM server that seal-graph owns."""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from rich.console import Console

from seal_graph import paths
from seal_graph.bundled_model import chat_template_path, resolve_model_dir
from seal_graph.client import ServedChatModel
from seal_graph.errors import ConfigError, ServerStartError
from seal_graph.serving.endpoint import ModelEndpoint
from seal_graph.serving.launch import (
    Platform,
    check_cpu_install,
    detect_platform,
    server_command,
    server_environment,
    serving_dtype,
)
from seal_graph.serving.policy_card import PolicyCard
from seal_graph.serving.settings import ServerSettings
from seal_graph.serving.weights import ServerWeights

_console = Console(stderr=True)
_LOG_TAIL_LINES = 40


def _die_with_parent() -> None:
    """Runs in the server's process before exec: SIGTERM it when the process that started
    it dies, even by SIGKILL, so a killed run never leaves a server (and its workers)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def claim_port(host: str, port: int) -> int:
    """Return `port` if it is free on `host` (or a free port when 0); else a clear error."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                f"port {port} on {host} is in use ({exc.strerror}). Pick another with "
                "--port, or attach to the server already there with --base-url."
            ) from exc
        return sock.getsockname()[1]


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last lines of a log file, for error messages."""
    if not path.exists():
        return ""
    with path.open(encoding="utf-8", errors="replace") as handle:
        return "".join(deque(handle, maxlen=lines)).rstrip()


class ModelServer:
    """A vLLM OpenAI-compatible server process owned by seal-graph.

    Use `ModelServer.start()` (or `seal_graph.serve()`) and `stop()`, or a `with` block.
    """

    def __init__(
        self,
        settings: ServerSettings,
        endpoint: ModelEndpoint,
        process: subprocess.Popen[bytes] | None,
        log_path: Path,
        platform: Platform,
        model_dir: Path,
        port: int,
    ) -> None:
        self.settings = settings
        self.endpoint = endpoint
        self.process = process
        self.log_path = log_path
        self.platform = platform
        self.model_dir = model_dir
        self.port = port
        self.restarts = 0
        self._stopping = threading.Event()
        self.supervision_failed: str | None = None
        """Why a supervised restart failed (the server is gone for good), if it did."""
        self.card = PolicyCard()
        """The policy card last read from the server while it ran (supervised servers)."""

    @classmethod
    def start(
        cls, settings: ServerSettings | None = None, *, wait: bool = True, **overrides: Any
    ) -> ModelServer:
        """Launch the server and block until it answers; raise `ServerStartError` if not.
        With `wait=False` it returns once the process is started: do other start-up work
        while vLLM loads, then call `wait_until_ready` (and `stop` if that work fails)."""
        settings = (settings or ServerSettings()).model_copy(update=overrides)
        settings = ServerSettings.model_validate(settings.model_dump())
        platform = detect_platform()
        if platform == "cpu":
            check_cpu_install()
        port = claim_port(settings.host, settings.port)
        model_dir = resolve_model_dir(settings.model)
        endpoint = ModelEndpoint(
            base_url=f"http://{settings.host}:{port}/v1",
            api_key=settings.api_key or secrets.token_hex(24),
            model=settings.served_model_name,
        )
        log_path = paths.logs_dir() / f"vllm-{settings.host}-{port}.log"
        server = cls(settings, endpoint, None, log_path, platform, model_dir, port)
        server._spawn()
        if wait:
            server.wait_until_ready()
        return server

    def command(self) -> list[str]:
        """The server's argv (a benchmark's plain-vLLM anchor overrides it)."""
        return server_command(
            self.settings, self.model_dir, chat_template_path(), self.port, self.dtype
        )

    def _spawn(self) -> None:
        """Start the server process (same port, key and model on every restart)."""
        self._spawned_at = time.monotonic()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(  # the server outlives this call; stop() ends it
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=server_environment(
                    self.settings, self.platform, self.endpoint.api_key, self.model_dir
                ),
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )

    @property
    def dtype(self) -> str:
        """The dtype the server computes in (`ServerSettings.dtype` resolved)."""
        return serving_dtype(self.settings, self.platform)

    def restart(self) -> None:
        """Start the server again after it died (or stop and start it); same endpoint.
        Runtime-loaded weights are gone: whoever loaded them restores them."""
        self._kill_group()
        self._spawn()
        self._wait_until_healthy()
        self.restarts += 1

    def supervise(
        self, on_restart: Callable[[], None] | None = None, poll_s: float = 1.0
    ) -> ModelServer:
        """Watch the process from a background thread; if it dies while the run still
        needs it, restart it and bring back the weights it served: `on_restart` (the
        owner reloads its trained weights), else those on the policy card it showed last
        (a trainer attached to `seal-graph serve` swapped them in). Clients' retries
        (tenacity, up to `SEAL_GRAPH_RETRY_BUDGET_S`) ride it out."""

        def watch() -> None:
            weights = ServerWeights(self.endpoint)
            try:
                watch_with(weights)
            finally:
                weights.close()

        def watch_with(weights: ServerWeights) -> None:
            polls = 0
            while not self._stopping.wait(poll_s):
                if self.process.poll() is None:
                    polls += 1
                    if on_restart is None and polls % 5 == 0:
                        self._read_card(weights)
                    continue
                _console.print(
                    f"[bold red]seal-graph[/]: the vLLM server at {self.endpoint.base_url} "
                    f"exited with code {self.process.returncode}; restarting it "
                    f"(log: {self.log_path})"
                )
                try:
                    self.restart()
                    if on_restart is not None:
                        on_restart()
                    elif self.card.weights:
                        weights.restore(self.card)
                        _console.print(
                            f"[bold]seal-graph[/]: restored {self.card.version} "
                            f"({self.card.method} weights {self.card.weights})"
                        )
                except Exception as exc:  # reported; the clients' retries then fail clearly
                    _console.print(f"[bold red]seal-graph[/]: restart failed: {exc}")
                    self.supervision_failed = f"{type(exc).__name__}: {exc}"
                    return

        threading.Thread(target=watch, name="seal-graph-server-watch", daemon=True).start()
        return self

    def _read_card(self, weights: ServerWeights) -> None:
        with contextlib.suppress(Exception):  # a busy or dying server: try again later
            self.card = weights.card() or self.card

    def wait_until_ready(self) -> None:
        """Block until the started server answers; on a `ServerStartError` (or an
        interrupt) the server is stopped before the error goes up."""
        try:
            self._wait_until_healthy()
        except BaseException:
            self.stop()
            raise

    def _wait_until_healthy(self) -> None:
        began = self._spawned_at
        deadline = began + self.settings.startup_timeout_s
        label = (
            f"starting vLLM ({self.platform}) for {self.model_dir.name} at {self.endpoint.base_url}"
        )
        with _console.status(label) as status:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise ServerStartError(
                        f"the vLLM server exited with code {code} before it was ready "
                        f"(full log: {self.log_path})",
                        log_tail(self.log_path),
                    )
                if self._healthy():
                    break
                if time.monotonic() > deadline:
                    raise ServerStartError(
                        f"the vLLM server was not ready after {self.settings.startup_timeout_s:.0f}"
                        f" s (full log: {self.log_path}). Raise startup_timeout_s if this "
                        "machine is slow.",
                        log_tail(self.log_path),
                    )
                last = log_tail(self.log_path, 1)[-100:]
                status.update(f"{label} — {time.monotonic() - began:.0f} s  [dim]{last}[/]")
                time.sleep(1.0)
        self.ready_after_s = time.monotonic() - began
        _console.print(
            f"[bold]seal-graph[/]: vLLM ready at {self.endpoint.base_url} as "
            f"'{self.endpoint.model}' after {self.ready_after_s:.0f} s (log: {self.log_path})"
        )

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.endpoint.server_root}/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def chat_model(self, **kwargs: Any) -> ServedChatModel:
        """A LangChain chat model bound to this server."""
        return self.endpoint.chat_model(**kwargs)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the server and every process it spawned (its whole process group)."""
        self._stopping.set()
        self._kill_group(timeout_s)

    def _kill_group(self, timeout_s: float = 30.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is not None:
            with contextlib.suppress(ProcessLookupError):  # workers it may have left
                os.killpg(self.process.pid, signal.SIGKILL)
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> ModelServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
