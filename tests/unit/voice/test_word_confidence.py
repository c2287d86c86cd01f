"""The offline recognizer's word confidence: a name the n-best hypotheses disagree on, or
one stretched over audio it does not explain, is doubtful at the floor's default threshold
even when its lattice posterior is 1.0; so its tool call is confirmed, never admitted."""

from __future__ import annotations

from services.interaction_surface.voice.engines.confidence import (
    MAX_FRAMES_PER_PHONE,
    agreement,
    base_word,
    stretched,
    word_confidence,
)
from services.interaction_surface.voice.floor import FloorConfig, Word, doubtful_values

NBEST = (
    "give me access to github and gitlab",
    "give me access to github and jira",
    "give me access to github and zendesk",
    "give me access to github and gitlab",
)
KNOWN = frozenset({"github", "gitlab", "jira", "zendesk", "okta"})


def test_agreement_is_the_share_of_hypotheses_holding_the_word() -> None:
    assert agreement("github", NBEST) == 1.0
    assert agreement("gitlab", NBEST) == 0.5
    assert agreement("git", NBEST) == 0.0  # whole words only
    assert agreement("anything", ()) == 1.0


def test_only_a_rival_name_votes_against_a_name() -> None:
    assert agreement("gitlab", NBEST, KNOWN) == 0.5
    # "yes" is no name: the hypotheses holding it take no side on "jira".
    fillers = ("to github and jira", "to github and yes", "to to github and jira")
    assert agreement("jira", fillers, KNOWN) == 1.0
    # The transcript need not be the first hypothesis: rivals are names the transcript lacks.
    reordered = ("access to okta and gitlab", "access to github and gitlab")
    assert agreement("github", reordered, KNOWN, best=reordered[1]) == 0.5
    assert agreement("gitlab", reordered, KNOWN, best=reordered[1]) == 1.0


def test_a_word_longer_than_its_phones_can_last_is_stretched() -> None:
    assert not stretched(frames=40, phones=6)
    assert stretched(frames=int(6 * MAX_FRAMES_PER_PHONE) + 1, phones=6)
    assert not stretched(frames=500, phones=0)  # no pronunciation: no duration evidence


def test_confidence_is_posterior_times_agreement_and_nothing_when_stretched() -> None:
    assert word_confidence(1.0, frames=40, phones=6, hypotheses=NBEST, word="github") == 1.0
    assert word_confidence(0.8, frames=40, phones=6, hypotheses=NBEST, word="gitlab") == 0.4
    # The language model's certainty does not outweigh the audio it could not explain.
    assert word_confidence(1.0, frames=107, phones=7, hypotheses=NBEST, word="github") == 0.0
    assert word_confidence(1.5, frames=40, phones=6, hypotheses=(), word="jira") == 1.0


def test_a_variant_is_its_word() -> None:
    assert base_word("slack(2)") == "slack"
    assert base_word("jira") == "jira"


def test_a_name_the_hypotheses_disagree_on_is_confirmed_not_admitted() -> None:
    calls = [("provision_access", {"accesses": ["github", "gitlab"]})]
    known = frozenset({"github", "gitlab", "jira", "zendesk"})
    heard = [
        Word(w, word_confidence(1.0, frames=30, phones=5, hypotheses=NBEST, word=w, names=known))
        for w in NBEST[0].split()
    ]
    assert doubtful_values(calls, heard, known, FloorConfig()) == ["gitlab"]
    sure = [Word(w, 1.0) for w in NBEST[0].split()]
    assert doubtful_values(calls, sure, known, FloorConfig()) == []
