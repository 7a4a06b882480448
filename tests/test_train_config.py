"""Training config: presets, file overrides, and errors that name the field and value."""

from __future__ import annotations

import pytest

from seal_graph.errors import ConfigError
from seal_graph.training.config import load_config


def test_presets_load_and_a_file_overrides_them(tmp_path) -> None:
    cpu, paper = load_config(None, "cpu"), load_config(None, "paper")
    assert (cpu.env, cpu.swap, paper.env, paper.rollout.group_size) == (
        "kv-calc",
        "full",
        "bfcl",
        8,
    )
    assert paper.optim.learning_rate == 1e-6 and paper.optim.beta == 0.001
    path = tmp_path / "run.toml"
    path.write_text('preset = "cpu"\niterations = 5\n[rollout]\ngroup_size = 6\n')
    config = load_config(path, None, algo="vanilla-grpo")
    assert (config.iterations, config.rollout.group_size, config.rollout.max_tokens) == (5, 6, 96)
    assert config.weighting_mode == "none" and not config.ablation.adaptation


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "[rollout]\ngroup_size = 1\n",
            "rollout.group_size: Input should be greater than or equal to 2 (got 1)",
        ),
        ('swap = "nccl"\n', "swap: Input should be 'lora' or 'full' (got 'nccl')"),
        ("iterations = \n", "is not valid TOML"),
        ('preset = "huge"\n', "unknown preset 'huge'"),
    ],
)
def test_bad_config_files_name_the_problem(tmp_path, text, needle) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=None) as info:
        load_config(path, None)
    assert needle in str(info.value)


def test_missing_config_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", None)


def test_shipped_scale_out_example_loads() -> None:
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples/paper-8gpu.toml"
    config = load_config(example)
    assert config.env == "bfcl" and config.swap == "lora"
    assert config.launcher is not None and config.launcher[:2] == ["accelerate", "launch"]
