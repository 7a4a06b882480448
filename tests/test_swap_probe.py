"""The swap probe's reference answer: the trainer scores ahead, a different answer is
scored after, and the trainer's runners-up are compared where the answers agree (no
server: `served_answer` is replaced by what a server would answer)."""

from __future__ import annotations

from seal_graph.serving import ModelEndpoint
from seal_graph.training.weight_sync import Probe, ProbeCheck, WeightSync, reference_probe

PROMPT = [1, 2, 3]


class Trainer:
    """Greedy answer 7, 8, 9, ...; every token's logprob -0.5, runners-up 100 + i (the
    i-th likeliest other token) at -5 - i everywhere; counts scoring calls."""

    def __init__(self) -> None:
        self.scored: list[list[int]] = []

    def completion_logprobs(self, prompt: list[int], completion: list[int]) -> list[float]:
        self.scored.append(completion)
        return [-0.5] * len(completion)

    def greedy_answer(
        self, prompt: list[int], max_new_tokens: int, k: int
    ) -> tuple[list[int], list[float], list[int], list[list[float]]]:
        answer = list(range(7, 7 + max_new_tokens))
        rows = [[-5.0 - i for i in range(k)] for _ in answer] if k else []
        return answer, [-0.5] * len(answer), [100 + i for i in range(k)], rows


class AnsweringSync(WeightSync):
    """A weight sync whose server answers with fixed tokens and logprobs."""

    def __init__(
        self, tokens: list[int], logprobs: list[float], runners_up: list[dict[int, float]] = ()
    ) -> None:
        endpoint = ModelEndpoint(base_url="http://127.0.0.1:1/v1", model="m", api_key="k")
        super().__init__(endpoint, "lora")
        self.answer = tokens, logprobs, list(runners_up)
        self.asked: list[int] = []

    def served_answer(self, probe: Probe) -> tuple[list[int], list[float], list[dict]]:
        self.asked.append(probe.answer_tokens)
        return self.answer


def referenced(trainer: Trainer, served: list[int], alternatives: int = 0) -> Probe:
    """A probe answered ahead by the trainer (4 tokens), its scoring calls then forgotten."""
    probe = Probe(prompt_token_ids=PROMPT, completion_token_ids=served)
    check = ProbeCheck(tolerance=0.001, answer_tokens=4, alternatives=alternatives)
    probe = reference_probe(probe, trainer, check)
    trainer.scored.clear()
    return probe


def test_reference_probe_holds_the_trainers_answer_and_its_logprobs() -> None:
    probe = referenced(Trainer(), served=[0] * 12)
    assert probe.completion_token_ids == [7, 8, 9, 10]
    assert probe.completion_logprobs == [-0.5] * 4
    assert probe.answer_tokens == 4  # the server is asked for as many, not 12


def test_the_same_served_answer_is_checked_without_scoring_inside_the_swap() -> None:
    trainer = Trainer()
    probe = referenced(trainer, served=[0])
    sync = AnsweringSync([7, 8, 9, 10], [-0.5, -0.5, -0.6, -0.5])
    mean, largest = sync.gap(probe, trainer.completion_logprobs)
    assert trainer.scored == [] and sync.asked == [4]
    assert abs(mean - 0.025) < 1e-9 and abs(largest - 0.1) < 1e-9
    # an answer cut short by the end of sequence is a prefix: still no scoring
    sync.answer = [7, 8], [-0.5, -0.5], []
    assert sync.gap(probe, trainer.completion_logprobs) == (0.0, 0.0) and trainer.scored == []


def test_a_different_served_answer_is_scored_by_the_trainer() -> None:
    trainer = Trainer()
    probe = referenced(trainer, served=[0])
    sync = AnsweringSync([7, 8, 42, 10], [-0.5, -0.5, -3.0, -0.5])
    mean, largest = sync.gap(probe, trainer.completion_logprobs)  # stale weights answer differently
    assert trainer.scored == [[7, 8, 42, 10]]
    assert abs(largest - 2.5) < 1e-9 and mean > 0.6


def test_runners_up_are_compared_where_the_answers_agree_so_a_stale_step_shows() -> None:
    trainer = Trainer()
    probe = referenced(trainer, served=[0], alternatives=2)
    assert probe.alternative_ids == [100, 101] and probe.alternative_logprobs[0] == [-5.0, -6.0]
    same = [{100: -5.0, 101: -6.0}] * 4
    sync = AnsweringSync([7, 8, 9, 10], [-0.5] * 4, same)
    assert sync.gap(probe, trainer.completion_logprobs) == (0.0, 0.0)
    # a step's change: the greedy tokens' logprobs (near 0) hold, their runners-up move
    moved = [{100: -5.03, 101: -5.98}] * 4
    sync.answer = [7, 8, 9, 10], [-0.5] * 4, moved
    mean, largest = sync.gap(probe, trainer.completion_logprobs)
    assert abs(largest - 0.03) < 1e-9 and abs(mean - 4 * 0.05 / 12) < 1e-9  # 4 + 4 x 2
    # answers that part at position 1: positions 0 and 1 are comparable, 2 and 3 are not
    sync.answer = [7, 42, 9, 10], [-0.5, -3.0, -0.5, -0.5], [same[0], same[0], {}, {}]
    mean, largest = sync.gap(probe, trainer.completion_logprobs)
    assert trainer.scored == [[7, 42, 9, 10]] and abs(largest - 2.5) < 1e-9
    assert abs(mean - 2.5 / 8) < 1e-9  # 4 answer tokens + 2 positions x 2 runners-up
