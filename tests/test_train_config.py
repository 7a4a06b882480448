"""Training config: presets, file overrides, and errors that name the field and value."""

from __future__ import annotations

from pathlib import Path

import pytest

from seal_graph.errors import ConfigError
from seal_graph.training.config import EvalSettings, load_config


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


def test_validating_a_config_imports_no_training_stack() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from seal_graph.training.config import load_config; "
        "load_config(None, 'cpu'); "
        "print(sorted(m for m in ('torch', 'trl', 'peft', 'transformers', 'vllm', 'datasets') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _models(model: type, seen: set[type] | None = None) -> set[type]:
    """A pydantic model and every pydantic model its fields hold."""
    from pydantic import BaseModel

    seen = seen if seen is not None else set()
    seen.add(model)
    for field in model.model_fields.values():
        annotation = field.annotation
        for candidate in (annotation, *getattr(annotation, "__args__", ())):
            model_type = isinstance(candidate, type) and issubclass(candidate, BaseModel)
            if model_type and candidate not in seen:
                _models(candidate, seen)
    return seen


def test_every_config_field_has_a_description() -> None:
    from seal_graph.training.config import TrainConfig

    missing = [
        f"{model.__name__}.{name}"
        for model in _models(TrainConfig)
        for name, field in model.model_fields.items()
        if not field.description
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (
            {"algo": "vanilla-grpo", "ablation": {"reweighting": True}},
            "algo='vanilla-grpo' runs with ablation.reweighting=False, but the config sets "
            "ablation.reweighting=True",
        ),
        (
            {"algo": "coevolve-dpo", "swap": "full"},
            "so it swaps by LoRA, but the config sets swap='full'",
        ),
        (
            {"algo": "eto", "ablation": {"adaptation": True, "reweighting": True}},
            "ablation.reweighting=True",
        ),
        ({"weighting": {"w_min": 3.0}}, "weighting.w_min=3.0 is above weighting.w_max=2.0"),
        ({"rollout": {"group_sise": 4}}, "rollout.group_sise: Extra inputs are not permitted"),
    ],
)
def test_contradictory_settings_are_refused_quoting_the_values(overrides, needle) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, "cpu", **overrides)
    assert needle in str(info.value)


def test_algorithms_fill_what_they_fix_when_the_config_leaves_it_out() -> None:
    coevolve = load_config(None, "cpu", algo="coevolve-dpo")  # the cpu preset says full
    assert coevolve.swap == "lora"
    eto = load_config(None, "cpu", algo="eto", ablation={"adaptation": True})
    assert (eto.ablation.adaptation, eto.ablation.reweighting) == (True, False)
    vanilla = load_config(None, "cpu", algo="vanilla-grpo")
    assert vanilla.weighting_mode == "none" and not vanilla.ablation.adaptation


def test_an_environment_object_from_python_is_registered_under_its_name() -> None:
    from seal_graph.environment import Task
    from seal_graph.records import Verdict
    from seal_graph.registry import get_environment
    from seal_graph.tools.langchain_env import from_langchain_tools

    tasks = [Task(id="q0", turns=["Say yes."])]
    env = from_langchain_tools(
        "python-object-env",
        tasks={"train": tasks, "test": tasks},
        tools=[],
        verify=lambda *_: Verdict(reward=0.0, success=False),
    )
    config = load_config(None, "cpu", env=env)
    assert config.env == "python-object-env" and get_environment(config.env) is env


def test_evaluation_follows_every_and_the_last_iteration_only_when_final_is_on() -> None:
    every_two = EvalSettings(every=2)
    assert [every_two.due(i, 5) for i in range(5)] == [False, True, False, True, True]
    caller_evaluates = EvalSettings(every=1, final=False)
    assert [caller_evaluates.due(i, 3) for i in range(3)] == [True, True, False]


def test_set_reaches_any_key_in_toml_syntax() -> None:
    from seal_graph.training.config import load_config, parse_assignments

    overrides = parse_assignments(
        [
            "optim.learning_rate=1e-4",
            "eval.final_splits=['ood']",
            "rollout.split=val",
            "iterations=3",
        ]
    )
    config = load_config(None, "cpu", **overrides)
    assert config.optim.learning_rate == 1e-4 and config.eval.final_splits == ["ood"]
    assert config.rollout.split == "val" and config.iterations == 3
    assert config.rollout.group_size == 4  # the preset's, untouched
    for bad in ("learning_rate", "=3", "iterations=3.x.y"):
        with pytest.raises(ConfigError):
            load_config(None, "cpu", **parse_assignments([bad]))


def test_the_config_reference_page_is_current() -> None:
    """docs/config.md is what the models generate: regenerate it with
    `.venv/bin/python -m seal_graph.training.config_reference > docs/config.md`."""
    from seal_graph.training.config_reference import reference

    page = Path(__file__).resolve().parents[1] / "docs/config.md"
    assert page.read_text(encoding="utf-8") == reference()
    assert "| `optim.learning_rate` |" in reference() and "| `dpo.beta_first` |" in reference()
