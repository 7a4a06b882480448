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

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from seal_graph.errors import ConfigError
from seal_graph.interface import InterfaceConfig
from seal_graph.serving.settings import ServingDtype
from seal_graph.settings import JudgeSettings, RolloutSettings
from seal_graph.training.from_run import FromRun
from seal_graph.training.settings import (
    DPOSettings,
    LoraSettings,
    OptimConfig,
    WarmStartSettings,
    WeightingConfig,
)

PRESETS = ("cpu", "paper")
Algo = Literal["seal", "vanilla-grpo", "eto", "coevolve-dpo"]
DPO_ALGOS = ("eto", "coevolve-dpo")


class LoopRolloutSettings(RolloutSettings):
    """The batch each iteration rolls out (the sampling settings, plus which tasks)."""

    split: str = Field(default="train", description="Split the training tasks come from.")
    tasks_per_iteration: int = Field(
        default=8, ge=1, description="Tasks per iteration (a seeded sample of the split)."
    )
    group_size: int = Field(default=4, ge=2, description="Samples per task (GRPO group).")
    max_tokens: int = Field(default=96, ge=1, description="Completion token limit per step.")
    step_limit: int = Field(default=4, ge=1, description="Agent steps per user turn.")


class EvalSettings(BaseModel):
    """Evaluation on the base interface, every `every` iterations and at the start."""

    model_config = ConfigDict(extra="forbid")

    split: str = Field(default="test", description="Split evaluated (greedy, base interface).")
    every: int = Field(default=1, ge=1, description="Evaluate after every N-th iteration.")
    limit: int | None = Field(default=16, ge=1, description="At most N tasks (None = all).")
    baseline: bool = Field(default=True, description="Evaluate before any training.")
    final: bool = Field(
        default=True,
        description="Evaluate after the last iteration (with `final_splits`). Off where the "
        "caller evaluates the final policy itself: `benchmarks/learning.py` does for runs "
        "served with LoRA, merged, on a LoRA-free server (an adapter decodes at ~half speed).",
    )
    final_splits: list[str] = Field(
        default_factory=list,
        description="More splits evaluated after the last iteration (e.g. kv-calc's 'ood').",
    )
    max_tokens: int = Field(default=96, ge=1, description="Completion token limit per step.")
    concurrency: int | None = Field(
        default=None,
        ge=1,
        description="Episodes in flight during an evaluation (None = the rollout's). "
        "Evaluation episodes end at their first failed turn, so more of them at once keep "
        "the server's batch full.",
    )
    samples: int = Field(
        default=0,
        ge=0,
        description="Sampled success too: this many episodes per task at the rollout "
        "temperature (0 = greedy only).",
    )

    def due(self, iteration: int, iterations: int) -> bool:
        """Whether iteration `iteration` (from 0) of a run of `iterations` ends evaluated."""
        if iteration + 1 == iterations:
            return self.final
        return (iteration + 1) % self.every == 0


class AblationSettings(BaseModel):
    """The paper's Table 3 switches."""

    model_config = ConfigDict(extra="forbid")

    adaptation: bool = Field(default=True, description="Environment-side interface evolution.")
    reweighting: bool = Field(default=True, description="Diagnosis-weighted advantages.")
    closed_loop: bool = Field(
        default=True,
        description="Keep evolving; False freezes the interface after the first diagnosis.",
    )


class TrainConfig(BaseModel):
    """Everything a `seal-graph train` run needs.

    Each algorithm fills the settings it fixes when the config leaves them out, and
    refuses a config that sets them otherwise (the message quotes both values).
    """

    model_config = ConfigDict(extra="forbid")

    env: str = Field(
        default="kv-calc",
        description="Environment: kv-calc, bfcl, bfcl-strict, 'package.module:factory', a "
        "registered name, or (from Python) an `Environment` object, registered under its "
        "name.",
    )
    model: str | None = Field(default=None, description="Checkpoint dir; None = bundled.")
    agent: str | None = Field(
        default=None,
        description="Your own agent as 'package.module:factory' (a factory of (chat model, "
        "tools) -> a LangGraph graph or runnable over messages, e.g. "
        "`langchain.agents:create_agent`): every rollout and evaluation runs it instead "
        "of the built-in rollout graph (`seal_graph.runners.own_agent`). None = built in.",
    )
    from_run: FromRun | None = Field(
        default=None,
        description="Train on a stored run instead of rolling out: one iteration whose "
        "batch is that run's episodes (`training/from_run.py`); needs iterations = 1.",
    )
    algo: Algo = Field(
        default="seal",
        description="seal / vanilla-grpo: GRPO; eto / coevolve-dpo: DPO on hard negatives "
        "(coevolve-dpo serves both agents as LoRA adapters, so it always swaps by LoRA).",
    )
    iterations: int = Field(default=2, ge=1, description="Loop iterations.")
    seed: int = Field(default=0, description="Seeds task sampling and sample subsets.")
    swap: Literal["lora", "full"] = Field(
        default="full", description="How new weights reach the server."
    )
    server_dtype: ServingDtype = Field(
        default="fastest",
        description="dtype of the server `train` starts (not one given by --base-url): "
        "fastest = bfloat16 where the CPU has bf16 kernels, else float32 (float32 for a "
        "LoRA-enabled server: `swap = lora`, coevolve-dpo). float32 serves on "
        "every CPU, so runs made on different machines compare (bf16 greedy decoding flips "
        "near-ties).",
    )
    servers: int = Field(
        default=1,
        ge=1,
        description="vLLM servers `train` starts (not those given by --base-url), each "
        "serving the policy: rollouts spread over them by task, every swap goes to each "
        "(training/replicas.py). On CPU the machine's cores are split between them.",
    )
    swap_tolerance: float | None = Field(
        default=None,
        gt=0,
        description="Max mean |served - trainer| logprob on the swap probe; None = per the "
        "server's dtype (`PROBE_CHECKS` in training/weight_sync.py: 0.0005 float32, "
        "which catches a server one iteration stale; 0.25 bfloat16 or unknown, which "
        "catches wrong weights only: bf16 numerics move logprobs more than training does).",
    )
    rollout: LoopRolloutSettings = Field(
        default_factory=LoopRolloutSettings, description="Each iteration's training batch."
    )
    eval: EvalSettings = Field(default_factory=EvalSettings, description="Evaluation.")
    interface: InterfaceConfig = Field(
        default_factory=InterfaceConfig, description="Interface evolution."
    )
    weighting: WeightingConfig = Field(
        default_factory=WeightingConfig, description="Diagnosis-weighted advantages (GRPO)."
    )
    optim: OptimConfig = Field(default_factory=OptimConfig, description="The GRPO step.")
    lora: LoraSettings = Field(default_factory=LoraSettings, description="The adapter.")
    ablation: AblationSettings = Field(
        default_factory=AblationSettings, description="The paper's ablation switches."
    )
    warm_start: WarmStartSettings = Field(
        default_factory=WarmStartSettings, description="Supervised warm start."
    )
    launcher: list[str] | None = Field(
        default=None,
        description="Run each optimiser step in separate processes under this command, "
        'e.g. ["accelerate", "launch", "--config_file", "multi_gpu.yaml"]; None = in-process.',
    )
    dpo: DPOSettings = Field(default_factory=DPOSettings, description="DPO rounds (eto, coevolve).")
    judge: JudgeSettings = Field(
        default_factory=JudgeSettings,
        description="Optional LLM judge for `unverified` turns in the diagnose stage.",
    )

    @field_validator("env", mode="before")
    @classmethod
    def _register_environment_object(cls, value: Any) -> Any:
        """An environment object from Python: the loop, its graphs and episodes refer to
        environments by name, so it is registered under its own."""
        from seal_graph.environment import Environment

        if not isinstance(value, Environment):
            return value
        from seal_graph.registry import register_environment

        return register_environment(value)

    @model_validator(mode="after")
    def _algorithm_settings(self, info: ValidationInfo) -> TrainConfig:
        """Fill what the algorithm fixes; refuse what the user set against it. A preset's
        values count as defaults (`load_config` passes the user's own keys as context)."""
        user = (info.context or {}).get("user")
        if user is None:  # built in Python (or a saved config): everything given counts
            given_top = self.model_fields_set
            given = self.ablation.model_fields_set if "ablation" in given_top else set()
        else:
            given_top, given = set(user), set(user.get("ablation") or {})
        fixed: dict[str, bool] = {}
        if self.algo == "vanilla-grpo":
            fixed = {"adaptation": False, "reweighting": False, "closed_loop": False}
        elif self.algo in DPO_ALGOS:  # the plain baselines; adaptation = true adds SEAL's
            adaptation = self.ablation.adaptation if "adaptation" in given else False
            fixed = {"reweighting": False, "closed_loop": adaptation and self.ablation.closed_loop}
            fixed["adaptation"] = adaptation
        for name, value in fixed.items():
            chosen = getattr(self.ablation, name)
            if name in given and chosen != value:
                raise ValueError(
                    f"algo={self.algo!r} runs with ablation.{name}={value}, but the config "
                    f"sets ablation.{name}={chosen}; "
                    + _ALGO_HINTS.get((self.algo, name), "drop the setting")
                )
        if fixed:
            self.ablation = AblationSettings.model_validate({**self.ablation.model_dump(), **fixed})
        if self.algo == "coevolve-dpo":
            if "swap" in given_top and self.swap != "lora":
                raise ValueError(
                    f"algo='coevolve-dpo' serves the target and the failure agent as two LoRA "
                    f"adapters on one server, so it swaps by LoRA, but the config sets "
                    f'swap={self.swap!r}; drop `swap` or set swap = "lora"'
                )
            self.swap = "lora"
        if self.from_run is not None and self.iterations != 1:
            raise ValueError(
                f"from_run trains one step on a stored run, but the config sets "
                f"iterations={self.iterations}; set iterations = 1"
            )
        return self

    @property
    def weighting_mode(self) -> str:
        return self.weighting.mode if self.ablation.reweighting else "none"


_ALGO_HINTS = {
    ("vanilla-grpo", "adaptation"): "for GRPO with interface evolution use algo = 'seal'",
    ("vanilla-grpo", "reweighting"): "for diagnosis-weighted GRPO use algo = 'seal'",
    ("eto", "reweighting"): "DPO has no advantages to reweight; drop ablation.reweighting",
    ("coevolve-dpo", "reweighting"): "DPO has no advantages to reweight; drop ablation.reweighting",
}


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
    user: dict[str, Any] = {}  # what the user set, as opposed to the preset's defaults
    if path is not None:
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        try:
            user = tomllib.loads(path.read_text("utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
        if "preset" in user:
            data = _merge(preset(user.pop("preset")), data)
    user = _merge(user, {k: v for k, v in overrides.items() if v is not None})
    data = _merge(data, user)
    try:
        return TrainConfig.model_validate(data, context={"user": user})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e.get('input')!r})"
            if e["loc"]
            else e["msg"].removeprefix("Value error, ")
            for e in exc.errors()
        )
        raise ConfigError(
            f"invalid training config{f' {path}' if path else ''}: {problems}"
        ) from exc


def parse_assignments(assignments: list[str]) -> dict[str, Any]:
    """`train --set section.key=value` as nested overrides: the value in TOML syntax
    (`1e-4`, `true`, `[1, 2]`, `"text"`), or a bare string when it is not TOML."""
    nested: dict[str, Any] = {}
    for assignment in assignments:
        key, sep, raw = assignment.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"--set takes key=value (e.g. optim.learning_rate=1e-4), got {assignment!r}"
            )
        try:
            value = tomllib.loads(f"value = {raw.strip()}")["value"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        *sections, last = key.strip().split(".")
        target = nested
        for section in sections:
            target = target.setdefault(section, {})
            if not isinstance(target, dict):
                raise ConfigError(f"--set {assignment!r}: {section!r} is a value, not a section")
        target[last] = value
    return nested
