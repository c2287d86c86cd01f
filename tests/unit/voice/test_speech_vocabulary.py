"""The offline recognizer's vocabulary: only the declared tools' names and phrases, a
back-off model whose distributions sum to one, telephone pronunciation variants."""

from __future__ import annotations

import math
from collections import defaultdict

from libs.tools import SpeechHints, ToolDeclaration
from services.interaction_surface.voice.engines.vocabulary import (
    CONVERSATION,
    SpeechVocabulary,
    arpa,
    dictionary,
    sentences,
    telephone_variants,
)
from services.interaction_surface.voice.speech_vocabulary import vocabulary_for, vocabulary_of

SPEECH = {
    "provision_access": (("github", "jira", "slack"), (("en", "give me access to {a}"),)),
    "transfer_money": ((), (("en", "cancel the transfer"),)),
}


def test_only_declared_tools_lend_their_names_and_phrases() -> None:
    none = vocabulary_for(["send_invoice"], SPEECH, {})
    assert none.names == ()
    assert none.phrases == CONVERSATION
    access = vocabulary_for(["provision_access", "send_invoice"], SPEECH, {"jira": ("JH IH R AH",)})
    assert access.names == ("github", "jira", "slack")
    assert ("en", "give me access to {a}") in access.phrases
    assert ("en", "cancel the transfer") not in access.phrases
    assert access.pronunciations == {"jira": ("JH IH R AH",)}


def test_the_vocabulary_comes_from_the_declarations_hints() -> None:
    hinted = ToolDeclaration(
        name="open_ticket", description="Open a ticket.", arguments=dict, executor="desk",
        speech=SpeechHints(
            names=("billing",), phrases=(("en", "open a ticket about {a}"),),
            pronunciations={"billing": ("B IH L IH NG",)},
        ),
    )
    silent = ToolDeclaration(
        name="close_ticket", description="Close a ticket.", arguments=dict, executor="desk"
    )
    vocabulary = vocabulary_of([hinted, silent])
    assert vocabulary.names == ("billing",)
    assert ("en", "open a ticket about {a}") in vocabulary.phrases
    assert vocabulary.pronunciations == {"billing": ("B IH L IH NG",)}
    assert vocabulary_of([silent]).names == ()


def test_sentences_fill_name_slots_with_distinct_names_reproducibly() -> None:
    vocabulary = SpeechVocabulary(
        names=("github", "jira", "slack"), phrases=(("en", "give me access to {a} and {b}"),)
    )
    made = sentences(vocabulary, seed=3)
    assert made == sentences(vocabulary, seed=3)
    assert all(s[4] != s[6] and s[4] in vocabulary.names for s in made)
    # A phrase needing more names than there are is left out.
    assert sentences(SpeechVocabulary(names=("github",), phrases=vocabulary.phrases)) == []


def _parse(model: str) -> tuple[dict[tuple[str, ...], float], dict[tuple[str, ...], float]]:
    prob: dict[tuple[str, ...], float] = {}
    backoff: dict[tuple[str, ...], float] = {}
    order = 0
    for line in model.splitlines():
        if line.startswith("\\") and line.endswith("-grams:"):
            order = int(line[1])
            continue
        parts = line.split()
        if order and len(parts) >= order + 1 and not line.startswith("ngram"):
            gram = tuple(parts[1 : order + 1])
            prob[gram] = 10 ** float(parts[0])
            if len(parts) == order + 2:
                backoff[gram] = 10 ** float(parts[-1])
    return prob, backoff


def _p(prob: dict[tuple[str, ...], float], backoff: dict[tuple[str, ...], float],
       gram: tuple[str, ...]) -> float:
    if gram in prob:
        return prob[gram]
    return backoff.get(gram[:-1], 1.0) * _p(prob, backoff, gram[1:])


def test_every_context_of_the_model_is_a_distribution() -> None:
    corpus = [s.split() for s in (
        "give me access to github", "give me access to jira and slack", "yes", "no thanks",
        "i need access to slack",
    )]
    model = arpa(corpus, order=3, discount=0.3)
    prob, backoff = _parse(model)
    vocab = [g[0] for g in prob if len(g) == 1 and g[0] != "<s>"]
    contexts: dict[tuple[str, ...], None] = defaultdict(lambda: None)
    for gram in prob:
        if len(gram) > 1:
            contexts[gram[:-1]]
    for context in contexts:
        total = sum(_p(prob, backoff, (*context, w)) for w in vocab)
        assert math.isclose(total, 1.0, rel_tol=1e-3), (context, total)


def test_a_sibilant_word_also_gets_a_variant_without_its_sibilants() -> None:
    slack = ("S", "L", "AE", "K")
    github = ("G", "IH", "T", "HH", "AH", "B")
    assert telephone_variants(slack) == [slack, ("L", "AE", "K")]
    assert telephone_variants(github) == [github]
    text, missing = dictionary(
        ["slack", "jira", "okta"], {"slack": "S L AE K"}, {"jira": ("JH IH R AH", "Y IY R AH")}
    )
    assert missing == ["okta"]
    assert text.splitlines() == [
        "jira JH IH R AH", "jira(2) Y IY R AH", "slack S L AE K", "slack(2) L AE K",
    ]
