"""What a training run shows and where the rest goes.

The console gets seal-graph's own lines (one per stage, with what it found) and a
transient progress bar per trainer call; everything the libraries underneath say — the
Python logging of transformers, datasets, TRL, PEFT, accelerate, torch, their warnings
and progress bars — goes to the run's `run.log`, where a failure can be read in full.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from seal_graph.training.console import console

LOG_FILE = "run.log"
LIBRARIES = (
    "transformers",
    "datasets",
    "trl",
    "peft",
    "accelerate",
    "torch",
    "huggingface_hub",
    "httpx",
    "py.warnings",
)
"""Loggers whose records belong in the run's log file, not on the console."""


def send_library_output_to(run_dir: Path) -> Path:
    """Route library logging, warnings and progress bars to `run_dir/run.log` (appending:
    a resumed run keeps its earlier log), instead of an earlier run's log file."""
    import datasets
    import huggingface_hub
    import transformers

    path = run_dir / LOG_FILE
    root = logging.getLogger()
    for earlier in [h for h in root.handlers if getattr(h, "seal_graph_run_log", False)]:
        root.removeHandler(earlier)  # an earlier run in this process (a sweep, a test)
        earlier.close()
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.seal_graph_run_log = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # seal-graph's own records; libraries keep their levels
    transformers.utils.logging.disable_default_handler()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    huggingface_hub.utils.disable_progress_bars()
    logging.captureWarnings(False)  # capture afresh: whatever replaced `showwarning` since
    logging.captureWarnings(True)  # an earlier run's capture (pytest does, per test) stays out
    warnings.simplefilter("default")  # each warning once per place, into the log
    for name in LIBRARIES:
        library = logging.getLogger(name)
        library.handlers.clear()
        library.propagate = True  # levels stay the libraries' own
    return path


class StepProgress(TrainerCallback):
    """One transient console bar per trainer call (optimiser steps, the latest loss);
    the trainer's logged dicts go to the log file instead of stdout."""

    def __init__(self, description: str) -> None:
        self.description = description
        self._progress: Progress | None = None
        self._task: Any = None
        self._log = logging.getLogger("seal_graph.training")

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._progress = Progress(
            TextColumn(f"[bold]{self.description}[/] {{task.description}}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task("steps", total=state.max_steps or None)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        logs = logs or {}
        self._log.info("%s step %s: %s", self.description, state.global_step, logs)
        if self._progress is not None and "loss" in logs:
            self._progress.update(self._task, description=f"steps, loss {float(logs['loss']):.4g}")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def show_steps(trainer: Any, description: str) -> None:
    """Replace the trainer's own printing (tqdm bar, logged dicts) with `StepProgress`."""
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(StepProgress(description))
