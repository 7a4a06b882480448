"""Start or resume a training run: config, server, live resources, the loop graph."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver

from seal_graph.bundled_model import resolve_model_dir
from seal_graph.errors import ConfigError, ServerError
from seal_graph.serving import DEFAULT_SERVED_NAME, ModelEndpoint, ModelServer, ServerSettings
from seal_graph.serving import attach as attach_endpoint
from seal_graph.training.config import TrainConfig
from seal_graph.training.console import console

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


def start_server(
    config: TrainConfig, base_url: str | None, api_key: str | None
) -> tuple[ModelEndpoint, ModelServer | None]:
    """The endpoint rollouts use under the stable name (LoRA: the base gets another name),
    and the server started for it, still loading (`announce_server` once it is ready)."""
    if base_url:
        endpoint = attach_endpoint(base_url, api_key=api_key)
        return endpoint.model_copy(update={"model": DEFAULT_SERVED_NAME}), None
    base_name = f"{DEFAULT_SERVED_NAME}-base" if config.swap == "lora" else DEFAULT_SERVED_NAME
    server = ModelServer.start(
        ServerSettings(
            model=config.model,
            served_model_name=base_name,
            dtype=config.server_dtype,
            # full swaps reload weights in place: no LoRA, about twice as fast on CPU
            enable_lora=config.swap == "lora" or config.algo == "coevolve-dpo",
            max_lora_rank=_rank(config.lora.r),
        ),
        wait=False,
    )
    return server.endpoint.model_copy(update={"model": DEFAULT_SERVED_NAME}), server


def announce_server(server: ModelServer) -> None:
    """Wait for the run's server, then say how other clients reach the agent it serves."""
    server.wait_until_ready()
    console.print(
        f"[bold]the agent being trained is served[/] at {server.endpoint.base_url} as "
        f"'{DEFAULT_SERVED_NAME}' (dtype {server.dtype}); each verified swap changes what it "
        f"answers with. For another client:\n"
        f"  export OPENAI_BASE_URL={server.endpoint.base_url}\n"
        f"  export OPENAI_API_KEY={server.endpoint.api_key}"
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
    base_url: str | None = None,
    api_key: str | None = None,
) -> dict[str, Any]:
    """Run (or resume) the closed loop to the end; returns the final graph output."""
    run_dir, config = prepare_run_dir(config, out, resume)
    # A fresh run starts vLLM first, so it loads while the training stack imports (~10 s);
    # a resumed one reads its checkpoint first (a finished run needs no server).
    started = None if resume else start_server(config, base_url, api_key)
    try:
        return _run(run_dir, config, resume, started, base_url, api_key)
    finally:
        if started is not None and started[1] is not None:
            started[1].stop()


def _run(
    run_dir: Path,
    config: TrainConfig,
    resume: bool,
    started: tuple[ModelEndpoint, ModelServer | None] | None,
    base_url: str | None,
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
        endpoint, server = started or start_server(config, base_url, api_key)
        run = None
        try:
            # the trainer's model load while vLLM loads
            run = open_run(
                run_dir,
                run_id,
                config,
                endpoint,
                resolve_model_dir(config.model),
                served,
                server.dtype if server is not None else None,
            )
            if server is not None:  # the warm start waits too: training beside vLLM's
                announce_server(server)  # start-up slows both (305 s against 49 + 215 s)
            result = loop.sync_server(run, served)
            if not result["ok"]:
                raise ServerError(
                    f"could not bring the server to policy step {served}: {result['error']}"
                )
            run.load_policy(trained)  # a step trained before the stop but not yet served
            run.algorithm.open(run, progress.get("algorithm") or run.algorithm.initial_state())
            if server is not None:  # a server that dies mid-run is restarted and re-synced
                server.supervise(on_restart=run.restore_served_weights)
            payload = None if snapshot.next else {"run_dir": str(run_dir)}
            return graph.invoke(
                payload, {**thread, "recursion_limit": 10_000}, context=LoopContext(run=run)
            )
        finally:
            if run is not None:
                run.close()
            if server is not None and started is None:
                server.stop()
