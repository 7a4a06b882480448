"""Which way an agent leans: call rate on turns that need a call, no-call rate on
abstention turns, replies naming what is missing; and the groups GRPO can learn from."""

from __future__ import annotations

from seal_graph.abstention import abstention_rates
from seal_graph.records import Episode, ToolEvent, TurnEvidence, TurnRecord
from seal_graph.registry import get_environment
from seal_graph.runners.evaluation import mixed_groups


def episode(task: str, calls: list[bool], expects: list[bool], replies: list[str]) -> Episode:
    messages: list[dict] = []
    for reply in replies:
        messages += [{"role": "user", "content": "u"}, {"role": "assistant", "content": reply}]
    return Episode(
        episode_id=f"{task}-{calls}",
        run_id="r",
        env="kv-calc",
        task_id=task,
        sample_index=0,
        messages=messages,
        tool_events=[
            ToolEvent(
                turn=i,
                step=0,
                call_id=f"c{i}",
                name="set_value",
                arguments={},
                status="ok",
                output="",
            )
            for i, called in enumerate(calls)
            if called
        ],
        turns=[
            TurnRecord(
                index=i,
                user_message="u",
                evidence=TurnEvidence(
                    turn=i, expects_calls=e, missing=None if e else ["number", "value"]
                ),
            )
            for i, e in enumerate(expects)
        ],
    )


def test_rates_per_category_count_only_reached_turns_that_say_what_they_need() -> None:
    batch = [
        # a miss_param task: turn 0 needs a number the user left out
        episode("p1", [True, True], [False, True], ["Stored.", "Done."]),
        episode("p2", [False, True], [False, True], ["Which number?", "Done."]),
        episode("p3", [False], [False], ["I can't."]),  # stopped after turn 0
        episode("b1", [True, False], [True, True], ["Done.", "Done."]),
    ]
    of = {"p1": "miss_param", "p2": "miss_param", "p3": "miss_param", "b1": "base"}
    rates = abstention_rates(batch, of.__getitem__)
    assert rates["miss_param"] == {
        "call_rate": 1.0,
        "no_call_rate": 2 / 3,
        "names_missing_rate": 1 / 3,  # "Which number?" names it; "I can't." does not
        "call_turns": 2,
        "abstention_turns": 3,
    }
    assert rates["base"]["call_rate"] == 0.5 and rates["base"]["no_call_rate"] is None
    assert rates["all"]["call_turns"] == 4 and rates["all"]["abstention_turns"] == 3


def test_kv_calc_names_what_each_abstention_turn_misses() -> None:
    env = get_environment("kv-calc")
    for task in env.tasks("val"):
        empty = [turn for turn, calls in enumerate(task.reference) if not calls]
        assert sorted(task.metadata.get("missing", {})) == empty, task.id
        if task.metadata["category"] == "miss_func":
            (words,) = task.metadata["missing"].values()
            assert task.tools_added_at_turn[2][0] in words  # the missing operation


def test_mixed_groups_per_category_under_either_reward() -> None:
    batch = [episode(t, [True], [True], ["ok"]) for t in ("a", "a", "b", "b")]
    batch[0].reward, batch[0].progress = 1.0, 1.0
    batch[2].progress = 0.5  # b: both failed, one passed a turn
    of = {"a": "base", "b": "miss_param"}
    assert mixed_groups(batch, of.__getitem__) == {"all": 0.5, "base": 1.0, "miss_param": 0.0}
    progress = mixed_groups(batch, of.__getitem__, lambda e: e.progress)
    assert progress == {"all": 1.0, "base": 1.0, "miss_param": 1.0}
