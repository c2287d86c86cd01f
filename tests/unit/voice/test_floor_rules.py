"""The floor's pure decisions: backchannels, yes/no, and which heard values are doubtful."""

from __future__ import annotations

from services.interaction_surface.voice.floor import (
    FloorConfig,
    Word,
    answer_of,
    doubtful_values,
    is_backchannel,
    question,
)

KNOWN = frozenset({"github", "jira", "notion"})
CALL = [("provision_access", {"accesses": ["github", "you"]})]


def heard(text: str, confidence: float = 0.95, **low: float) -> list[Word]:
    return [Word(w, low.get(w, confidence)) for w in text.split()]


def test_backchannels_are_short_acknowledgements_only() -> None:
    config = FloorConfig()
    for said in ("mm-hmm", "Uh huh.", "sí", "right right", "aha"):
        assert is_backchannel(said, config), said
    for said in ("", "wait", "uh huh wait a second", "no", "right, cancel that"):
        assert not is_backchannel(said, config), said
    assert not is_backchannel("mm hmm", FloorConfig(backchannels=frozenset({"okay"})))


def test_spoken_answers() -> None:
    assert answer_of("Yes.") is True
    assert answer_of("no") is False
    assert answer_of("give me access to jira") is None


def test_a_value_outside_the_catalogue_or_heard_with_low_confidence_is_doubtful() -> None:
    config = FloorConfig()
    words = heard("give me access to github and you")
    assert doubtful_values(CALL, words, KNOWN, config) == ["you"]
    assert question(CALL, words).startswith("Did you say github and you?")
    sure = [("provision_access", {"accesses": ["github", "jira"]})]
    assert doubtful_values(sure, heard("give me access to github and jira"), KNOWN, config) == []
    unsure = heard("give me access to github and jira", jira=0.3)
    assert doubtful_values(sure, unsure, KNOWN, config) == ["jira"]
    # Without a catalogue only the confidence counts; values no heard word made are left be.
    assert doubtful_values(CALL, words, frozenset(), config) == []
    filled = [("transfer_money", {"to_account": "acct-1", "currency": "EUR"})]
    assert doubtful_values(filled, heard("send it", 0.1), KNOWN, config) == []


def test_thresholds_are_configurable() -> None:
    unsure = heard("give me access to github and jira", jira=0.3)
    sure = [("provision_access", {"accesses": ["github", "jira"]})]
    off = FloorConfig(confirm_below=0.0, confirm_unknown=False)
    assert doubtful_values(sure, unsure, KNOWN, off) == []
    assert doubtful_values(sure, unsure, KNOWN, FloorConfig(confirm_below=0.2)) == []
