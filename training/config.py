"""One config for a training run: every hyperparameter, validated, with named presets.

A run is described by a TOML file (`seal-graph train --config FILE`) or a preset
(`--preset cpu` for this 2-core machine, `--preset paper` for the SEAL paper's GPU
recipe); a file may start from a preset (`preset = "cpu"`) and override any field.
Errors name the field and the value.
"""

from __future__ import annotations

import importlib.resources
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from seal_graph.errors import ConfigError
from seal_graph.interface import InterfaceConfig
from seal_graph.training.advantages import WeightingConfig
from seal_graph.training.dpo import DPOSettings
from seal_graph.training.grpo import OptimConfig
from seal_graph.training.policy import LoraSettings
from seal_graph.training.sft import WarmStartSettings

PRESETS = ("cpu", "paper")
DPO_ALGOS = ("eto", "coevolve-dpo")


class RolloutSettings(BaseModel):
    """The batch each iteration rolls out."""

    split: str = "train"
    tasks_per_iteration: int = Field(default=8, ge=1)
    group_size: int = Field(default=4, ge=2, description="Samples per task (GRPO group).")
    temperature: float = Field(default=1.0, ge=0)
    max_tokens: int = Field(default=96, ge=1)
    step_limit: int = Field(default=4, ge=1, description="Agent steps per user turn.")
    concurrency: int = Field(default=8, ge=1)


class EvalSettings(BaseModel):
    """Evaluation on the base interface, every `every` iterations and at the start."""

    split: str = "test"
    every: int = Field(default=1, ge=1)
    limit: int | None = Field(default=16, ge=1)
    baseline: bool = Field(default=True, description="Evaluate before any training.")
    final_splits: list[str] = Field(
        default_factory=list,
        description="More splits evaluated after the last iteration (e.g. kv-calc's 'ood').",
    )
    max_tokens: int = Field(default=96, ge=1)


class AblationSettings(BaseModel):
    """The paper's Table 3 switches."""

    adaptation: bool = Field(default=True, description="Environment-side interface evolution.")
    reweighting: bool = Field(default=True, description="Diagnosis-weighted advantages.")
    closed_loop: bool = Field(
        default=True,
        description="Keep evolving; False freezes the interface after the first diagnosis.",
    )


class TrainConfig(BaseModel):
    """Everything a `seal-graph train` run needs."""

    env: str = "kv-calc"
    model: str | None = Field(default=None, description="Checkpoint dir; None = bundled.")
    algo: Literal["seal", "vanilla-grpo", "eto", "coevolve-dpo"] = Field(
        default="seal",
        description="seal / vanilla-grpo: GRPO; eto / coevolve-dpo: DPO on hard negatives "
        "(coevolve-dpo serves both agents as LoRA adapters, so it always swaps by LoRA).",
    )
    iterations: int = Field(default=2, ge=1)
    seed: int = 0
    swap: Literal["lora", "full"] = Field(
        default="full", description="How new weights reach the server."
    )
    swap_tolerance: float = Field(default=0.05, gt=0, description="Max probe logprob diff.")
    rollout: RolloutSettings = Field(default_factory=RolloutSettings)
    eval: EvalSettings = Field(default_factory=EvalSettings)
    interface: InterfaceConfig = Field(default_factory=InterfaceConfig)
    weighting: WeightingConfig = Field(default_factory=WeightingConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    lora: LoraSettings = Field(default_factory=LoraSettings)
    ablation: AblationSettings = Field(default_factory=AblationSettings)
    warm_start: WarmStartSettings = Field(default_factory=WarmStartSettings)
    launcher: list[str] | None = Field(
        default=None,
        description="Run each optimiser step in separate processes under this command, "
        'e.g. ["accelerate", "launch", "--config_file", "multi_gpu.yaml"]; None = in-process.',
    )

    dpo: DPOSettings = Field(default_factory=DPOSettings)

    @model_validator(mode="after")
    def _algorithm_defaults(self) -> TrainConfig:
        if self.algo == "vanilla-grpo":
            self.ablation = AblationSettings(adaptation=False, reweighting=False, closed_loop=False)
        if self.algo in DPO_ALGOS and "ablation" not in self.model_fields_set:
            # the plain baselines; set [ablation] adaptation = true to add SEAL's interface
            self.ablation = AblationSettings(adaptation=False, reweighting=False, closed_loop=False)
        if self.algo == "coevolve-dpo":
            self.swap = "lora"
        return self

    @property
    def weighting_mode(self) -> str:
        return self.weighting.mode if self.ablation.reweighting else "none"


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        merged[key] = (
            _merge(merged[key], value)
            if isinstance(value, dict) and isinstance(merged.get(key), dict)
            else value
        )
    return merged


def preset(name: str) -> dict[str, Any]:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; use one of: {', '.join(PRESETS)}")
    text = (
        importlib.resources.files("seal_graph.training")
        .joinpath(f"presets/{name}.toml")
        .read_text("utf-8")
    )
    return tomllib.loads(text)


def load_config(
    path: Path | None = None, preset_name: str | None = None, **overrides: Any
) -> TrainConfig:
    """Preset, then file, then command-line overrides; validated with readable errors."""
    data: dict[str, Any] = preset(preset_name) if preset_name else {}
    if path is not None:
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        try:
            file_data = tomllib.loads(path.read_text("utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
        if "preset" in file_data:
            data = _merge(preset(file_data.pop("preset")), data)
        data = _merge(data, file_data)
    data = _merge(data, {k: v for k, v in overrides.items() if v is not None})
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']} (got {e.get('input')!r})"
            for e in exc.errors()
        )
        raise ConfigError(
            f"invalid training config{f' {path}' if path else ''}: {problems}"
        ) from exc
