"""The offline recognizer's vocabulary, from the tools a deployment declares.

The composition root (app.py) gives the declared tools (`vocabulary_of`), each with how
callers say its requests (`ToolDeclaration.speech`: its catalogue names and phrases per
language, plus pronunciations); only the entries of declared tools reach the recognizer, so
a deployment sees none of another's names. The general conversation (yes, no, wait, backchannels) is
always in (`vocabulary.CONVERSATION`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from libs.tools import ToolDeclaration

from .engines.vocabulary import CONVERSATION, SpeechVocabulary

# tool name -> (catalogue names, (language, phrase template) pairs)
ToolSpeech = Mapping[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]


def vocabulary_for(
    tools: Iterable[str],
    speech: ToolSpeech,
    pronunciations: Mapping[str, tuple[str, ...]],
) -> SpeechVocabulary:
    """The conversation's phrases plus the declared tools' names and phrases."""
    names: list[str] = []
    phrases: list[tuple[str, str]] = list(CONVERSATION)
    for tool in tools:
        if tool in speech:
            tool_names, tool_phrases = speech[tool]
            names.extend(tool_names)
            phrases.extend(tool_phrases)
    return SpeechVocabulary(
        names=tuple(dict.fromkeys(names)),
        phrases=tuple(dict.fromkeys(phrases)),
        pronunciations=dict(pronunciations),
    )


def vocabulary_of(declarations: Iterable[ToolDeclaration]) -> SpeechVocabulary:
    """The vocabulary of the declared tools' speech hints (`ToolDeclaration.speech`)."""
    speech: dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]] = {}
    pronunciations: dict[str, tuple[str, ...]] = {}
    for declaration in declarations:
        if declaration.speech is not None:
            speech[declaration.name] = (declaration.speech.names, declaration.speech.phrases)
            pronunciations.update(declaration.speech.pronunciations)
    return vocabulary_for(speech, speech, pronunciations)
