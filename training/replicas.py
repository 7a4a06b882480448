"""Every server a run trains for, on one verified version.

Rollouts scale out by adding vLLM servers (one per GPU or node, or CPU cores split between
them); a run that swapped weights into only one would roll out from stale weights on all
the others. `Replicas` swaps each new version into every server in rotation and verifies
each with the probe (`WeightSync`). A replica that cannot serve the new version is not
left serving old weights: one the run started is restarted and given the new weights;
one it cannot restart (attached by URL), or that fails again, leaves the rotation, and
the run says so. If no replica takes the new version, every one is rolled back and the
run goes on at the old version, as with a single server. Before an iteration's rollouts
`agree` reads every replica's policy card: rollouts start only when all serve one version.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
from pydantic import BaseModel, Field

from seal_graph.errors import ServerError
from seal_graph.serving import ModelEndpoint, ModelServer
from seal_graph.serving.weights import ServerWeights
from seal_graph.training.console import console
from seal_graph.training.weight_sync import Probe, Scorer, SwapReport, WeightSync


@dataclass
class Replica:
    """One server of the run: how weights reach it, and its process if the run owns it."""

    sync: WeightSync
    server: ModelServer | None = None
    in_rotation: bool = True

    @property
    def url(self) -> str:
        return self.sync.endpoint.base_url


class ReplicaSwap(BaseModel):
    """One replica's part in a swap."""

    url: str
    ok: bool
    seconds: float
    mean_logprob_diff: float | None = None
    restarted: bool = False
    left_rotation: bool = False
    error: str | None = None


class ReplicasSwap(BaseModel):
    """A swap over every replica in rotation: the first replica's report (the run's
    headline numbers), and each replica's outcome."""

    report: SwapReport
    replicas: list[ReplicaSwap] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Some replica serves the new version (every one left in rotation does)."""
        return any(r.ok for r in self.replicas)


class Replicas:
    """The run's servers (the first one is the primary: an agent beside the policy, such
    as the failure agent, lives there)."""

    def __init__(self, replicas: list[Replica]) -> None:
        if not replicas:
            raise ValueError("a run needs at least one server")
        self.all = replicas
        self.version = "base"
        """The version every replica in rotation serves (the last swap some replica took)."""

    @property
    def primary(self) -> Replica:
        return self.all[0]

    def serving(self) -> list[Replica]:
        return [r for r in self.all if r.in_rotation]

    def endpoints(self) -> list[ModelEndpoint]:
        """Where rollouts go: every replica in rotation."""
        return [r.sync.endpoint for r in self.serving()]

    def swap(self, weights: Path, version: str, probe: Probe, score: Scorer) -> ReplicasSwap:
        """Serve `weights` as `version` on every replica in rotation, each verified; the
        replicas load at once (each swap waits on its own server)."""
        serving = self.serving()
        with ThreadPoolExecutor(len(serving)) as pool:
            swapped = pool.map(lambda r: r.sync.swap(weights, version, probe, score), serving)
            reports = list(zip(serving, swapped, strict=True))
        outcome = ReplicasSwap(report=reports[0][1])
        if not any(report.ok for _, report in reports):  # nobody moved: all stay, rolled back
            outcome.replicas = [_outcome(r, report) for r, report in reports]
            return outcome
        self.version = version
        for replica, report in reports:
            if report.ok:
                outcome.replicas.append(_outcome(replica, report))
            else:
                outcome.replicas.append(self._bring_to(replica, weights, probe, score, report))
        return outcome

    def _bring_to(
        self, replica: Replica, weights: Path, probe: Probe, score: Scorer, failed: SwapReport
    ) -> ReplicaSwap:
        """A replica that failed a swap the others took: restarted with the new weights,
        or out of rotation."""
        if replica.server is not None:
            console.print(
                f"[bold yellow]replica {replica.url}[/] failed the swap to {self.version} "
                f"({failed.error}); restarting it with the new weights"
            )
            try:
                replica.server.restart()
                retried = replica.sync.swap(weights, self.version, probe, score)
            except ServerError as exc:
                retried = failed.model_copy(update={"error": f"restart failed: {exc}"})
            if retried.ok:
                return _outcome(replica, retried, restarted=True)
            failed = retried
        self._leave(replica, f"it could not serve {self.version}: {failed.error}")
        return _outcome(replica, failed)

    def _leave(self, replica: Replica, why: str) -> None:
        replica.in_rotation = False
        console.print(
            f"[bold red]replica {replica.url} left the rotation[/]: {why}. Rollouts go to "
            f"{len(self.serving())} replica(s) from here on."
        )

    def agree(self) -> list[str]:
        """Check that every replica in rotation serves `version`, by its policy card
        where it has one (a plain vLLM server has none: then by what was swapped into
        it); one that does not leaves the rotation. The URLs still serving; raises when
        none is."""
        for replica in self.serving():
            try:
                card = _card_version(replica.sync.endpoint)
            except (ServerError, httpx.HTTPError) as exc:
                self._leave(replica, f"its policy card could not be read ({exc})")
                continue
            served = card if card is not None else replica.sync.version
            if served != self.version:
                self._leave(replica, f"it serves {served!r}, not {self.version!r}")
        if not self.serving():
            raise ServerError(
                f"no replica serves {self.version}: every one failed or left the rotation. "
                "Check the servers (their logs), then rerun with --resume."
            )
        return [r.url for r in self.serving()]

    def supervise(self, restore_primary: Callable[[], None]) -> None:
        """Restart any server the run owns if it dies, and give it back its weights."""
        for replica in self.all:
            if replica.server is not None:
                restore = restore_primary if replica is self.primary else replica.sync.restore
                replica.server.supervise(on_restart=restore)

    def close(self) -> None:
        for replica in self.all:
            replica.sync.close()


def _outcome(replica: Replica, report: SwapReport, restarted: bool = False) -> ReplicaSwap:
    return ReplicaSwap(
        url=replica.url,
        ok=report.ok,
        seconds=report.seconds,
        mean_logprob_diff=report.mean_logprob_diff,
        restarted=restarted,
        left_rotation=not replica.in_rotation,
        error=None if report.ok else report.error,
    )


def _card_version(endpoint: ModelEndpoint) -> str | None:
    weights = ServerWeights(endpoint)
    try:
        card = weights.card()
    finally:
        weights.close()
    return card.version if card is not None else None
