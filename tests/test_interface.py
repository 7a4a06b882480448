"""The evolving training interface: direction, retirement, and evaluation untouched."""

from __future__ import annotations

import json

import pytest
from fake_models import call, scripted
from langchain_core.messages import convert_to_openai_messages

from seal_graph.errors import ConfigError
from seal_graph.graphs.rollout import RolloutContext, graph
from seal_graph.interface import (
    BASE_INTERFACE,
    ERROR_HINTS,
    GUIDELINES,
    SCHEMA_NOTE,
    InterfaceConfig,
    evolve,
)
from seal_graph.records import LabelStat
from seal_graph.registry import register_environment
from seal_graph.tools.kv_calc import make_env

CONFIG = InterfaceConfig()


def stats(**labels: tuple[int, float]) -> dict[str, LabelStat]:
    total = sum(count for count, _ in labels.values())
    return {
        name: LabelStat(label=name, count=count, prevalence=count / total, mean_reward=reward)
        for name, (count, reward) in labels.items()
    }


def test_a_dominant_label_gets_a_guideline_with_its_cause() -> None:
    batch = stats(missing_tool_call=(30, 0.0), **{"pass": (10, 1.0)}, response_mismatch=(2, 0.0))
    v1 = evolve(BASE_INTERFACE, batch, [], CONFIG)
    assert v1.version == 1 and v1.parent == 0
    guidelines = v1.of_kind("guideline")
    assert [g.key for g in guidelines] == ["missing_tool_call"]  # response_mismatch: count 2
    assert guidelines[0].caused_by["count"] == 30
    assert guidelines[0].caused_by["prevalence"] == pytest.approx(30 / 42)
    assert GUIDELINES["missing_tool_call"] in v1.system_prompt("base prompt")
    assert "guideline for missing_tool_call" in v1.summary


def test_at_most_three_guidelines_ranked_by_prevalence_times_failure() -> None:
    batch = stats(
        missing_tool_call=(20, 0.0),
        invalid_tool_call=(30, 0.5),
        state_mismatch=(25, 0.1),
        recovery_failure=(12, 0.2),
        argument_mismatch=(13, 0.0),
    )
    keys = [g.key for g in evolve(BASE_INTERFACE, batch, [], CONFIG).of_kind("guideline")]
    assert keys == ["state_mismatch", "missing_tool_call", "invalid_tool_call"]


def test_adaptation_is_retired_when_its_label_disappears() -> None:
    v1 = evolve(BASE_INTERFACE, stats(missing_tool_call=(30, 0.0)), [], CONFIG)
    same = evolve(v1, stats(missing_tool_call=(25, 0.1)), [], CONFIG)
    assert same is v1  # nothing to change, no new version
    v2 = evolve(v1, stats(**{"pass": (40, 1.0)}, missing_tool_call=(1, 0.0)), [], CONFIG)
    assert v2.version == 2 and not v2.of_kind("guideline")
    assert [r.key for r in v2.retired] == ["missing_tool_call"]
    assert "retired guideline for missing_tool_call" in v2.summary
    assert v2.of_kind("schema")  # phi_schema stays on


def test_error_hints_follow_error_patterns_and_never_reveal_a_call() -> None:
    errors = ["Error: invalid arguments for add (a): 'x' is not of type 'number'"] * 3
    v1 = evolve(BASE_INTERFACE, {}, errors, CONFIG)
    (hint,) = v1.of_kind("error_hint")
    assert hint.key == "type_mismatch" and hint.caused_by == {"occurrences": 3}
    shown = v1.error_text(errors[0])
    assert shown.startswith(errors[0]) and shown.endswith(ERROR_HINTS["type_mismatch"][1])
    assert "add(" not in hint.text and "'x'" not in hint.text
    assert v1.error_text("something else entirely") == "something else entirely"


def test_an_environments_own_hint_answers_its_errors_and_no_path_hint_does() -> None:
    sql = ["Error: (sqlite3.OperationalError) no such column: prise"] * 3
    assert evolve(BASE_INTERFACE, {}, sql, CONFIG).of_kind("error_hint") == []  # not a path
    hints = {"sql_unknown_name": (r"no such (column|table)", "Hint: list the schema first.")}
    v1 = evolve(BASE_INTERFACE, {}, sql, CONFIG, hints)
    (hint,) = v1.of_kind("error_hint")
    assert hint.key == "sql_unknown_name" and hint.caused_by == {"occurrences": 3}
    assert v1.error_text(sql[0]).endswith("Hint: list the schema first.")
    files = ["Error: No such file or directory: 'notes/a.txt'"] * 3
    (path_hint,) = evolve(BASE_INTERFACE, {}, files, CONFIG, hints).of_kind("error_hint")
    assert path_hint.key == "no_such_path"  # built-in hints keep their own kind


def test_schema_annotations_mark_required_parameters() -> None:
    v1 = evolve(BASE_INTERFACE, {}, [], CONFIG)
    tools = {t.name: t for t in v1.tools(make_env().open(make_env().tasks()[0]).tools(0))}
    assert "key [required] (string); value [required] (number)" in tools["set_value"].description
    assert SCHEMA_NOTE in v1.system_prompt(None)


def wire(model) -> str:
    """Every request as it would go over the wire: messages and tool schemas."""
    return json.dumps([convert_to_openai_messages(m) for m in model.seen]) + json.dumps(
        model.bound_schemas
    )


async def _rollout(interface, mode):
    env = make_env()
    task = env.tasks("test")[0]
    model = scripted(call("set_value", {"key": "zz", "value": "NaN?"}), "done", "ok", "ok")
    await graph.ainvoke(
        {"task_id": task.id},
        context=RolloutContext(
            env=register_environment(env), chat_model=model, interface=interface, mode=mode
        ),
    )
    return model


async def test_evaluation_prompts_are_byte_identical_to_the_base_interface_with_fake_model():
    adapted = evolve(
        BASE_INTERFACE, stats(missing_tool_call=(30, 0.0)), ["is not of type"] * 3, CONFIG
    )
    base = await _rollout(None, "eval")
    trained = await _rollout(adapted, "train")
    # training sees the adapted interface: guidelines, annotations, an error hint ...
    assert trained.seen[0][0].content != base.seen[0][0].content
    assert trained.bound_schemas[0] != base.bound_schemas[0]
    assert ERROR_HINTS["type_mismatch"][1] in trained.seen[1][-1].content
    again = await _rollout(BASE_INTERFACE, "eval")  # ... evaluation never does
    assert wire(again) == wire(base)
    with pytest.raises(ConfigError, match="evaluation always runs the base interface"):
        await _rollout(adapted, "eval")
