"""Which way an agent leans on turns that need a call and on turns that need none.

Success hides the direction an agent moves in: an agent at 0% on `miss_param` may call a
tool on every turn, or on none. Three rates, over the user turns an episode reached
whose verifier said whether they need a call (`TurnEvidence.expects_calls`):

* `call_rate`: on turns that need a call, the share where the agent made one;
* `no_call_rate`: on abstention turns (the right response asks for what is missing, or
  says no tool can do it), the share where it called nothing;
* `names_missing_rate`: on abstention turns whose evidence lists what is missing
  (`TurnEvidence.missing`), the share whose reply names one of those words.

`abstention_rates` gives them per category and over all, with their counts, for an
evaluation, a training batch, a report or the learning page alike.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from pydantic import BaseModel

from seal_graph.records import Episode


class AbstentionCounts(BaseModel):
    """Turn counts behind the three rates."""

    call_turns: int = 0
    called: int = 0
    abstention_turns: int = 0
    abstained: int = 0
    missing_turns: int = 0
    named_missing: int = 0

    def add(self, episode: Episode) -> None:
        """Count the episode's reached turns that say whether they need a call."""
        for turn in episode.turns:
            expects = turn.evidence.expects_calls
            if expects is None:
                continue
            made_calls = bool(episode.calls(turn.index))
            if expects:
                self.call_turns += 1
                self.called += made_calls
                continue
            self.abstention_turns += 1
            self.abstained += not made_calls
            missing = getattr(turn.evidence, "missing", None)
            if missing:
                self.missing_turns += 1
                reply = episode.reply(turn.index).lower()
                self.named_missing += any(word.lower() in reply for word in missing)

    def rates(self) -> dict[str, float | int | None]:
        """The rates (None where no turn counts) and their denominators."""

        def share(part: int, whole: int) -> float | None:
            return part / whole if whole else None

        return {
            "call_rate": share(self.called, self.call_turns),
            "no_call_rate": share(self.abstained, self.abstention_turns),
            "names_missing_rate": share(self.named_missing, self.missing_turns),
            "call_turns": self.call_turns,
            "abstention_turns": self.abstention_turns,
        }


def abstention_rates(
    episodes: Iterable[Episode], category_of: Callable[[str], str]
) -> dict[str, dict[str, float | int | None]]:
    """The rates per category (`category_of(task_id)`) and over all (`all`)."""
    counts: dict[str, AbstentionCounts] = defaultdict(AbstentionCounts)
    for episode in episodes:
        counts[category_of(episode.task_id)].add(episode)
        counts["all"].add(episode)
    return {name: counts[name].rates() for name in sorted(counts)}
