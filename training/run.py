"""Start or resume a training run: config, server, live resources, the loop graph."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver

from seal_graph.bundled_model import resolve_model_dir
from seal_graph.errors import ConfigError, ServerError
from seal_graph.serving import DEFAULT_SERVED_NAME, ModelEndpoint, ModelServer, ServerSettings
from seal_graph.serving import attach as attach_endpoint
from seal_graph.serving.launch import detect_platform
from seal_graph.training.config import TrainConfig
from seal_graph.training.console import console
from seal_graph.training.from_run import stored_episodes

CONFIG_FILE = "config.json"


def prepare_run_dir(
    config: TrainConfig | None, out: Path | None, resume: bool
) -> tuple[Path, TrainConfig]:
    """A fresh run directory with its config, or an existing one to resume."""
    if resume:
        if out is None or not (out / CONFIG_FILE).is_file():
            raise ConfigError(
                f"--resume needs --out pointing at an earlier run directory "
                f"(one with {CONFIG_FILE}); got {out}"
            )
        return out, TrainConfig.model_validate_json((out / CONFIG_FILE).read_text())
    assert config is not None
    run_dir = out or Path("runs") / f"train-{config.env}-{time.strftime('%Y%m%d-%H%M%S')}"
    if (run_dir / CONFIG_FILE).exists():
        raise ConfigError(
            f"{run_dir} already holds a run; pass --resume to continue it or choose another --out"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_FILE).write_text(config.model_dump_json(indent=2), encoding="utf-8")
    return run_dir, config


Started = list[tuple[ModelEndpoint, ModelServer | None]]
"""The run's servers: each endpoint (under the stable name) and its process when the run
started it (None: attached by URL)."""


def start_servers(
    config: TrainConfig, base_urls: list[str], api_key: str | None, run_dir: Path
) -> Started:
    """The endpoints rollouts use under the stable name (LoRA: the base gets another
    name): the servers at `base_urls`, else `config.servers` started here, still loading
    (`announce_servers` once they are ready), loading weights from `run_dir` only."""
    if base_urls:
        return [
            (
                attach_endpoint(url, api_key=api_key).model_copy(
                    update={"model": DEFAULT_SERVED_NAME}
                ),
                None,
            )
            for url in base_urls
        ]
    base_name = f"{DEFAULT_SERVED_NAME}-base" if config.swap == "lora" else DEFAULT_SERVED_NAME
    started: Started = []
    try:
        for cores in core_split(config.servers):
            server = ModelServer.start(
                ServerSettings(
                    model=config.model,
                    served_model_name=base_name,
                    dtype=config.server_dtype,
                    # full swaps reload weights in place: no LoRA, about twice as fast on CPU
                    enable_lora=config.swap == "lora" or config.algo == "coevolve-dpo",
                    max_lora_rank=_rank(config.lora.r),
                    cpu_cores=cores,
                    weight_roots=[run_dir],
                ),
                wait=False,
            )
            started.append(
                (server.endpoint.model_copy(update={"model": DEFAULT_SERVED_NAME}), server)
            )
    except BaseException:
        stop_servers(started)
        raise
    return started


def core_split(servers: int) -> list[str | None]:
    """Each server's CPU cores: the machine's split evenly (one server: vLLM's default)."""
    if servers == 1:
        return [None]
    if detect_platform() != "cpu":
        raise ConfigError(
            f"servers={servers} starts several servers on CPU only; on GPUs start one vLLM "
            "server per GPU (`seal-graph serve`, or vllm serve) and pass each with --base-url"
        )
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < servers:
        raise ConfigError(
            f"servers={servers} needs a core each; this machine gives the run {len(cores)}"
        )
    share = len(cores) // servers
    return [",".join(map(str, cores[i * share : (i + 1) * share])) for i in range(servers)]


def stop_servers(started: Started) -> None:
    for _, server in started:
        if server is not None:
            server.stop()


def announce_servers(started: Started) -> None:
    """Wait for the run's servers, then say how other clients reach the agent they serve."""
    for endpoint, server in started:
        if server is None:
            continue
        server.wait_until_ready()
        console.print(
            f"[bold]the agent being trained is served[/] at {endpoint.base_url} as "
            f"'{DEFAULT_SERVED_NAME}' (dtype {server.dtype}); each verified swap changes what "
            f"it answers with. For another client:\n"
            f"  export OPENAI_BASE_URL={endpoint.base_url}\n"
            f"  export OPENAI_API_KEY={endpoint.api_key}"
        )


def _rank(r: int) -> int:
    for allowed in (8, 16, 32, 64, 128):
        if r <= allowed:
            return allowed
    raise ConfigError(f"lora.r={r} is above vLLM's largest supported rank (128)")


def run_training(
    config: TrainConfig | None,
    out: Path | None = None,
    resume: bool = False,
    base_url: str | list[str] | None = None,
    api_key: str | None = None,
) -> dict[str, Any]:
    """Run (or resume) the closed loop to the end; returns the final graph output.
    `base_url`: the server(s) to train for, attached; None starts `config.servers`."""
    if config is not None and config.from_run is not None:  # before anything is written
        stored_episodes(config.from_run)
    run_dir, config = prepare_run_dir(config, out, resume)
    urls = [base_url] if isinstance(base_url, str) else list(base_url or [])
    # A fresh run starts vLLM first, so it loads while the training stack imports (~10 s);
    # a resumed one reads its checkpoint first (a finished run needs no server).
    started = None if resume else start_servers(config, urls, api_key, run_dir)
    try:
        return _run(run_dir, config, resume, started, urls, api_key)
    finally:
        if started is not None:
            stop_servers(started)


def _run(
    run_dir: Path,
    config: TrainConfig,
    resume: bool,
    started: Started | None,
    base_urls: list[str],
    api_key: str | None,
) -> dict[str, Any]:
    from seal_graph.graphs.train_loop import LoopContext, builder
    from seal_graph.training import loop
    from seal_graph.training.resources import open_run
    from seal_graph.training.run_output import send_library_output_to

    log = send_library_output_to(run_dir)
    console.print(f"[bold]seal-graph[/]: run {run_dir.name}; library logs in {log}")
    run_id = run_dir.name
    checkpoints = run_dir / "loop.checkpoints.sqlite"
    thread = {"configurable": {"thread_id": run_id}}
    with SqliteSaver.from_conn_string(str(checkpoints)) as saver:
        graph = builder.compile(checkpointer=saver, name="train_loop")
        snapshot = graph.get_state(thread)
        if resume and not snapshot.next and snapshot.values.get("report_path"):
            console.print(f"run {run_id} already finished: {snapshot.values['report_path']}")
            return dict(snapshot.values)
        progress = snapshot.values
        served = progress.get("served_version", 0)
        trained = progress.get("policy_version", served)
        servers = started or start_servers(config, base_urls, api_key, run_dir)
        owned = [server for _, server in servers]
        run = None
        try:
            # the trainer's model load while vLLM loads
            run = open_run(
                run_dir,
                run_id,
                config,
                [endpoint for endpoint, _ in servers],
                resolve_model_dir(config.model),
                served,
                owned[0].dtype if owned[0] is not None else None,
                owned,
            )
            # the warm start waits too: training beside vLLM's start-up slows both (305 s
            # against 49 + 215 s)
            announce_servers(servers)
            result = loop.sync_server(run, served)  # every replica
            if not result["ok"]:
                raise ServerError(
                    f"could not bring the server(s) to policy step {served}: {result['error']}"
                )
            run.load_policy(trained)  # a step trained before the stop but not yet served
            run.algorithm.open(run, progress.get("algorithm") or run.algorithm.initial_state())
            # a server of the run's that dies mid-run is restarted and re-synced
            run.replicas.supervise(restore_primary=run.restore_served_weights)
            payload = None if snapshot.next else {"run_dir": str(run_dir)}
            return graph.invoke(
                payload, {**thread, "recursion_limit": 10_000}, context=LoopContext(run=run)
            )
        finally:
            if run is not None:
                run.close()
            if started is None:
                stop_servers(servers)
