"""The `seal-graph` command line: thin wrappers over the library.

Expected failures (`SealGraphError`) print one clear message and exit 1 without a
traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from seal_graph import registry
from seal_graph.errors import ConfigError, SealGraphError
from seal_graph.serving import DEFAULT_SERVED_NAME, ModelEndpoint, ModelServer, ServerSettings
from seal_graph.serving import attach as attach_endpoint
from seal_graph.tools.bfcl.export import DEFAULT_MODEL_NAME as BFCL_MODEL_NAME

app = typer.Typer(
    name="seal-graph",
    help="Train tool-using LLM agents by co-evolving the agent and its environment.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
console = Console()
err_console = Console(stderr=True)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn expected errors into a red message and exit code 1."""
    try:
        yield
    except SealGraphError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True)
        raise typer.Exit(code=1) from None


ModelOpt = Annotated[
    str | None,
    typer.Option(
        help="Local checkpoint directory to serve (default: bundled SmolLM2-135M), "
        "or with --base-url the served model name to use."
    ),
]
BaseUrlOpt = Annotated[
    str | None, typer.Option(help="Attach to a running OpenAI-compatible server instead.")
]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        envvar="SEAL_GRAPH_API_KEY",
        show_envvar=True,
        help="API key (generated when seal-graph starts the server).",
    ),
]
PortOpt = Annotated[int, typer.Option(help="Port for a server seal-graph starts (0 = free).")]


def open_endpoint(
    model: str | None, base_url: str | None, api_key: str | None, port: int
) -> tuple[ModelEndpoint, ModelServer | None]:
    """Attach to `base_url`, or start a server; returns the endpoint and the owned server."""
    if base_url:
        return attach_endpoint(base_url, api_key=api_key, model=model), None
    server = ModelServer.start(ServerSettings(model=model, api_key=api_key, port=port))
    return server.endpoint, server.supervise()  # restarted if it dies mid-run


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM stops `serve` the same way Ctrl-C does: the server is shut down cleanly."""
    raise KeyboardInterrupt


@app.command()
def serve(
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    served_model_name: Annotated[str, typer.Option(help="Stable name.")] = DEFAULT_SERVED_NAME,
    dtype: Annotated[
        str,
        typer.Option(
            help="fastest (bf16 where the CPU has bf16 kernels, float32 with --lora on CPU) "
            "| float32 | bfloat16"
        ),
    ] = "fastest",
    lora: Annotated[
        bool, typer.Option(help="Allow LoRA swaps (--no-lora: full swaps only, ~2x faster on CPU).")
    ] = True,
    weight_root: Annotated[
        list[Path] | None,
        typer.Option(
            help="A folder the server may load new weights from (repeat for more); "
            "default: the current directory. Other paths are refused (403)."
        ),
    ] = None,
) -> None:
    """Serve a model over the OpenAI API with tool calling, runtime LoRA and weight reload."""
    with user_errors():
        if base_url:
            endpoint = attach_endpoint(base_url, api_key=api_key, model=model)
            served = ", ".join(endpoint.list_models())
            console.print(f"attached to {endpoint.base_url}; serving: {served}")
            return
        settings = ServerSettings(
            model=model,
            api_key=api_key,
            host=host,
            port=port,
            served_model_name=served_model_name,
            dtype=dtype,
            enable_lora=lora,
            **({"weight_roots": weight_root} if weight_root else {}),
        )
        with ModelServer.start(settings) as server:
            console.print(
                f"[bold green]serving[/] '{server.endpoint.model}' at {server.endpoint.base_url}\n"
                f"  export OPENAI_BASE_URL={server.endpoint.base_url}\n"
                f"  export OPENAI_API_KEY={server.endpoint.api_key}\n"
                f"  export SEAL_GRAPH_API_KEY={server.endpoint.api_key}\n"
                f"log: {server.log_path}    stop with Ctrl-C"
            )
            if not settings.loopback:
                console.print(
                    f"[yellow]{host} is reachable from the network[/]: the API needs the key; "
                    "in-place full-weight reload is off (vLLM's reload routes have no auth), "
                    "LoRA swaps still work."
                )
            signal.signal(signal.SIGTERM, _interrupt)
            server.supervise()  # a dying vLLM is restarted (message on stderr)
            with contextlib.suppress(KeyboardInterrupt):
                while server.supervision_failed is None:
                    time.sleep(1)
            if server.supervision_failed is not None:
                raise SealGraphError(
                    f"the server died and could not be restarted ({server.supervision_failed}); "
                    f"see {server.log_path}"
                )


@app.command()
def demo(
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    port: PortOpt = 0,
    out: Annotated[Path | None, typer.Option(help="Where the demo's traces go.")] = None,
) -> None:
    """One tool-using exchange, then a batch of verified kv-calc rollouts into a store."""
    from seal_graph.runners.demo import run_demo, run_rollout_demo

    with user_errors():
        endpoint, server = open_endpoint(model, base_url, api_key, port)
        try:
            run_demo(endpoint, console)
            run_rollout_demo(endpoint, console, out or Path("runs") / "demo")
        finally:
            if server:
                server.stop()


@app.command("eval")
def eval_command(
    env: Annotated[
        str, typer.Option(help="Environment: kv-calc, bfcl, bfcl-strict, or module:factory.")
    ],
    split: Annotated[str, typer.Option(help="Task split.")] = "test",
    categories: Annotated[
        str | None, typer.Option(help="Comma-separated categories (BFCL: base,miss_func,...).")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="At most N tasks (round-robin).")] = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    port: PortOpt = 0,
    concurrency: Annotated[int, typer.Option(help="Rollouts in flight.")] = 8,
    max_tokens: Annotated[int, typer.Option(help="Completion tokens per agent step.")] = 256,
    samples: Annotated[
        int, typer.Option(help="Also sample N episodes per task (a second table row).")
    ] = 0,
    temperature: Annotated[float, typer.Option(help="Temperature of the samples.")] = 0.7,
    out: Annotated[Path | None, typer.Option(help="Results directory.")] = None,
    bfcl_model_name: Annotated[
        str,
        typer.Option(
            help="BFCL: the model name the exported results are filed under. `bfcl evaluate` "
            "scores only names it has registered; any OpenAI function-calling one decodes "
            "the export."
        ),
    ] = BFCL_MODEL_NAME,
) -> None:
    """Evaluate a model on an environment split (temperature 0, base interface): success
    per category with 95% intervals, and sampled success with --samples."""
    import asyncio

    from seal_graph.runners.evaluation import evaluate, render_table
    from seal_graph.settings import RolloutSettings

    with user_errors():
        if limit is not None and limit < 1:
            raise ConfigError(f"--limit must be at least 1 (got {limit})")
        if concurrency < 1:
            raise ConfigError(f"--concurrency must be at least 1 (got {concurrency})")
        if samples < 0 or temperature < 0:
            raise ConfigError("--samples and --temperature cannot be negative")
        wanted = [c.strip() for c in categories.split(",") if c.strip()] if categories else None
        out_dir = out or Path("runs") / f"eval-{env}-{split}-{time.strftime('%Y%m%d-%H%M%S')}"
        registry.get_environment(env)  # fail fast on a bad name, before starting a server
        endpoint, server = open_endpoint(model, base_url, api_key, port)
        try:
            summary = asyncio.run(
                evaluate(
                    env,
                    endpoint,
                    split=split,
                    out_dir=out_dir,
                    categories=wanted,
                    limit=limit,
                    settings=RolloutSettings(
                        concurrency=concurrency, max_tokens=max_tokens, temperature=temperature
                    ),
                    bfcl_model_name=bfcl_model_name,
                    samples=samples,
                )
            )
        finally:
            if server:
                server.stop()
        console.print(render_table(summary))
        console.print(
            f"{summary.episodes} episodes in {summary.wall_seconds:.0f} s "
            f"({summary.rollouts_per_second:.3f} rollouts/s); "
            f"{100 * summary.model_wait_share:.0f}% of episode time waiting on the model.\n"
            f"results: {out_dir / 'results.json'}  traces: {out_dir / 'traces.sqlite'}"
        )
        if summary.bfcl_command:
            console.print(
                "score the exported results with BFCL's own evaluator (bfcl-eval installed "
                f"with its dependencies):\n  {summary.bfcl_command}",
                soft_wrap=True,
            )


@app.command()
def evolve(
    run: Annotated[str, typer.Option(help="Run id in the trace store.")],
    store: Annotated[Path, typer.Option(help="Trace store (SQLite file).")],
    env: Annotated[
        str | None,
        typer.Option(
            help="The batch's environment, if not built in (module:factory): its reference "
            "solutions, argument matching and error hints, as the training loop uses them."
        ),
    ] = None,
    interface_version: Annotated[
        int | None, typer.Option(help="Diagnose the batch of this interface version.")
    ] = None,
    schema_annotations: Annotated[bool, typer.Option(help="phi_schema.")] = True,
    error_hints: Annotated[bool, typer.Option(help="phi_err.")] = True,
    guidelines: Annotated[bool, typer.Option(help="phi_cap.")] = True,
    min_error_count: Annotated[
        int, typer.Option(min=1, help="phi_err: errors of one pattern before it gets a hint.")
    ] = 3,
    min_label_count: Annotated[
        int, typer.Option(min=1, help="phi_cap: occurrences of a label before a guideline.")
    ] = 8,
) -> None:
    """Diagnose a stored batch, print its label table, and evolve the training interface.
    Labels are stored only for a batch that has none (a training run's stay as they are)."""
    import asyncio

    from seal_graph.evolution_report import render_evolution
    from seal_graph.graphs.diagnose_evolve import EvolveContext, graph
    from seal_graph.interface import InterfaceConfig

    with user_errors():
        if not store.is_file():
            raise ConfigError(f"no trace store at {store}: give the path of a traces.sqlite")
        if env is not None:
            registry.get_environment(env)  # registered under its name, as the episodes say
        payload: dict[str, object] = {"store_path": str(store), "run_id": run}
        if interface_version is not None:
            payload["interface_version"] = interface_version
        config = InterfaceConfig(
            schema_annotations=schema_annotations,
            error_hints=error_hints,
            guidelines=guidelines,
            min_error_count=min_error_count,
            min_count=min_label_count,
        )
        result = asyncio.run(graph.ainvoke(payload, context=EvolveContext(config=config)))
        render_evolution(console, result, store, run)


@app.command()
def train(
    env: Annotated[str | None, typer.Option(help="Environment (overrides the config).")] = None,
    config: Annotated[Path | None, typer.Option(help="TOML config file.")] = None,
    preset: Annotated[str | None, typer.Option(help="Preset: cpu | paper.")] = None,
    iterations: Annotated[int | None, typer.Option(help="Loop iterations.")] = None,
    algo: Annotated[
        str | None, typer.Option(help="seal | vanilla-grpo | eto | coevolve-dpo.")
    ] = None,
    model: ModelOpt = None,
    agent: Annotated[
        str | None,
        typer.Option(
            help="Train your own agent: 'module:factory', a factory of (chat model, tools) "
            "-> a LangGraph graph over messages (e.g. one that calls create_agent)."
        ),
    ] = None,
    from_run: Annotated[
        str | None,
        typer.Option(
            help="Train one step on this stored run's episodes (with --store) instead of "
            "rolling out, then swap and verify."
        ),
    ] = None,
    store: Annotated[
        Path | None, typer.Option(help="The trace store (SQLite) that holds --from-run.")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Run directory.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the run in --out.")] = False,
    base_url: Annotated[
        list[str] | None,
        typer.Option(
            help="Train the policy running servers serve instead of starting one; repeat "
            "for several (each is swapped and verified; one API key for all)."
        ),
    ] = None,
    api_key: ApiKeyOpt = None,
    assignments: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Any config key, repeatable: --set optim.learning_rate=1e-4 "
            "(every key: docs/config.md).",
        ),
    ] = None,
) -> None:
    """Closed-loop training: rollouts -> diagnose -> evolve -> GRPO step -> swap -> eval."""
    with user_errors():
        from seal_graph.training.config import load_config, parse_assignments
        from seal_graph.training.run import run_training

        settings = None
        if not resume:
            if config is None and preset is None:
                preset = "cpu"
            overrides = parse_assignments(assignments or [])
            named = {
                "env": env,
                "iterations": iterations,
                "algo": algo,
                "model": model,
                "agent": agent,
            }
            overrides.update({k: v for k, v in named.items() if v is not None})
            if (from_run is None) != (store is None):
                raise ConfigError("--from-run RUN and --store traces.sqlite go together")
            if from_run is not None:  # one step on what is stored: no warm start first
                overrides |= {"from_run": {"run": from_run, "store": store}, "iterations": 1}
                overrides.setdefault("warm_start", {"epochs": 0})
            settings = load_config(config, preset, **overrides)
            registry.get_environment(settings.env)  # fail fast on a bad name
            if settings.agent:
                registry.agent_factory(settings.agent)
        output = run_training(settings, out=out, resume=resume, base_url=base_url, api_key=api_key)
        history = output.get("history", [])
        console.print(
            f"[bold green]done[/]: {len(history)} iterations; report: {output.get('report_path')}"
        )
