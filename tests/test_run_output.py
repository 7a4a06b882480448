"""A training run's console shows seal-graph's lines; what the libraries underneath say
(logging, warnings, progress bars, the trainer's logged dicts) goes to the run's log."""

from __future__ import annotations

import logging
import warnings

from transformers.trainer_callback import PrinterCallback, ProgressCallback

from seal_graph.training.run_output import StepProgress, send_library_output_to, show_steps


def test_library_logs_and_warnings_go_to_the_runs_log_not_the_console(tmp_path, capfd) -> None:
    (tmp_path / "a").mkdir()
    first = send_library_output_to(tmp_path / "a")
    logging.getLogger("transformers.modeling_utils").warning("a transformers warning")
    warnings.warn("a library warning", UserWarning, stacklevel=1)
    second_dir = tmp_path / "b"
    second_dir.mkdir()
    second = send_library_output_to(second_dir)  # a second run in the same process
    logging.getLogger("datasets.builder").warning("a datasets warning")
    for handler in logging.getLogger().handlers:
        handler.flush()
    console = capfd.readouterr()
    assert "warning" not in console.err + console.out
    assert "a transformers warning" in first.read_text()
    assert "a library warning" in first.read_text()
    assert "a datasets warning" in second.read_text()
    assert "a datasets warning" not in first.read_text()


def test_a_trainer_shows_one_progress_bar_instead_of_its_dicts(tmp_path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    tiny = LlamaConfig(
        vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=1, num_key_value_heads=1,
    )  # fmt: skip
    for tqdm_off in (True, False):  # a printer callback, or a tqdm bar
        args = TrainingArguments(str(tmp_path), disable_tqdm=tqdm_off, report_to="none")
        trainer = Trainer(model=LlamaForCausalLM(tiny), args=args)
        show_steps(trainer, "warm start")
        kinds = [type(c) for c in trainer.callback_handler.callbacks]
        assert StepProgress in kinds
        assert PrinterCallback not in kinds and ProgressCallback not in kinds
