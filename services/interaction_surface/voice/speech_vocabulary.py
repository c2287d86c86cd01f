"""The offline recognizer's vocabulary, from the tools a deployment declares.

The composition root (app.py) gives the declared tools' names and a table of how callers
say each tool's requests (its catalogue names and phrases per language, plus
pronunciations); only the entries of declared tools reach the recognizer, so a deployment
sees none of another's names. The general conversation (yes, no, wait, backchannels) is
always in (`vocabulary.CONVERSATION`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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
