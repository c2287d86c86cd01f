"""What a domain recognizer may hear: names, phrases, pronunciations; and its language model.

A `SpeechVocabulary` is given to the recognizer by the surface's composition root (see
`voice/speech_vocabulary.py`): the catalogue names the declared tools act on, the phrases
callers use for them per language (templates with `{a}`, `{b}`, `{c}` for names), and
pronunciations for words the bundled dictionary lacks (Spanish words spelt in the en-us
phone set: only an English acoustic model ships). The engine imports no tool and no name.

Pure functions build the decoder's inputs: `sentences` (the phrases with names drawn
reproducibly), `arpa` (a back-off n-gram model with absolute discounting, trigram by
default), `dictionary` (pronunciations with telephone variants: the 300-3400 Hz band
carries little of /s/, /z/ or /sh/, so a word with one also gets a variant without it).
"""

from __future__ import annotations

import collections
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# Phones whose energy lies mostly above the telephone band.
SIBILANTS = frozenset({"S", "Z", "SH", "ZH"})

# What any call says, whatever the tools: answers, waits, thanks and backchannels (heard as
# what they are, so a "mm-hmm" is not forced into a request).
CONVERSATION: tuple[tuple[str, str], ...] = (
    ("en", "yes"), ("en", "no"), ("en", "yes please"), ("en", "no thanks"),
    ("en", "wait"), ("en", "wait one moment please"), ("en", "hold on"), ("en", "one moment"),
    ("en", "what is the status"), ("en", "thank you"),
    ("en", "mm hmm"), ("en", "uh huh"), ("en", "mhm"), ("en", "hmm"), ("en", "aha"),
    ("en", "right"),
    ("es", "sí"), ("es", "no"), ("es", "espera"), ("es", "un momento"), ("es", "gracias"),
)


@dataclass(frozen=True, slots=True)
class SpeechVocabulary:
    """The domain a recognizer is built for (see the module docstring)."""

    # Catalogue names the tools act on ("github", "jira"): the values a caller may name.
    names: tuple[str, ...] = ()
    # (language, template) pairs; `{a}`, `{b}`, `{c}` stand for distinct names.
    phrases: tuple[tuple[str, str], ...] = CONVERSATION
    # word -> CMU-style pronunciations ("G IH T HH AH B"), added to the bundled dictionary's.
    pronunciations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def merged(self, other: SpeechVocabulary) -> SpeechVocabulary:
        """Both vocabularies at once (names and phrases in order, without repeats)."""
        return SpeechVocabulary(
            names=tuple(dict.fromkeys((*self.names, *other.names))),
            phrases=tuple(dict.fromkeys((*self.phrases, *other.phrases))),
            pronunciations={**self.pronunciations, **other.pronunciations},
        )


def sentences(vocabulary: SpeechVocabulary, seed: int = 1, per_template: int = 40) -> list[
    list[str]
]:
    """Sentences from the phrases, names drawn at random (reproducibly); a phrase without a
    name slot counts a few times, so it is not drowned by the requests."""
    rng = random.Random(seed)  # noqa: S311 - corpus variety, not security
    names = list(vocabulary.names)
    out: list[list[str]] = []
    for _language, template in vocabulary.phrases:
        slots = sum(f"{{{s}}}" in template for s in "abc")
        if slots and len(names) < slots:
            continue
        for _ in range(per_template if slots else 4):
            a, b, c = (rng.sample(names, 3) if len(names) >= 3 else [*names, "", "", ""][:3])
            out.append(template.format(a=a, b=b, c=c).split())
    return out


def arpa(corpus: Iterable[Sequence[str]], order: int = 3, discount: float = 0.5) -> str:
    """A back-off n-gram model (absolute discounting, interpolated) in ARPA format."""
    counts: list[collections.Counter[tuple[str, ...]]] = [
        collections.Counter() for _ in range(order + 1)
    ]
    for sentence in corpus:
        words = ["<s>", *sentence, "</s>"]
        for n in range(1, order + 1):
            for i in range(len(words) - n + 1):
                counts[n][tuple(words[i : i + n])] += 1
    unigram_total = sum(c for (w,), c in counts[1].items() if w != "<s>")
    prob: dict[tuple[str, ...], float] = {
        g: (c / unigram_total if g != ("<s>",) else 0.0) for g, c in counts[1].items()
    }
    backoff: dict[tuple[str, ...], float] = {}
    for n in range(2, order + 1):
        context_total: collections.Counter[tuple[str, ...]] = collections.Counter()
        followers: collections.Counter[tuple[str, ...]] = collections.Counter()
        for gram, c in counts[n].items():
            context_total[gram[:-1]] += c
            followers[gram[:-1]] += 1
        for gram, c in counts[n].items():
            h = gram[:-1]
            lam = discount * followers[h] / context_total[h]
            prob[gram] = (c - discount) / context_total[h] + lam * prob[gram[1:]]
        # Back-off weights: what the seen continuations leave, over what the lower order
        # gives the unseen ones.
        seen: dict[tuple[str, ...], list[tuple[str, ...]]] = collections.defaultdict(list)
        for gram in counts[n]:
            seen[gram[:-1]].append(gram)
        for h, grams in seen.items():
            left = 1.0 - sum(prob[g] for g in grams)
            lower_left = 1.0 - sum(prob[g[1:]] for g in grams)
            backoff[h] = max(left, 1e-9) / max(lower_left, 1e-9)
    lines = ["\\data\\"]
    lines += [f"ngram {n}={len(counts[n])}" for n in range(1, order + 1)]
    for n in range(1, order + 1):
        lines += ["", f"\\{n}-grams:"]
        for gram in sorted(counts[n]):
            p = math.log10(prob[gram]) if prob[gram] > 0 else -99.0
            line = f"{p:.4f} {' '.join(gram)}"
            if n < order:
                line += f" {math.log10(backoff.get(gram, 1.0)):.4f}"
            lines.append(line)
    lines += ["", "\\end\\", ""]
    return "\n".join(lines)


def telephone_variants(phones: Sequence[str]) -> list[tuple[str, ...]]:
    """The pronunciation, and (when it has a sibilant) the same without its sibilants."""
    base = tuple(phones)
    out = [base]
    stripped = tuple(p for p in base if p not in SIBILANTS)
    if stripped and stripped != base:
        out.append(stripped)
    return out


def dictionary(
    words: Iterable[str],
    bundled: Mapping[str, str],
    extra: Mapping[str, tuple[str, ...]],
) -> tuple[str, list[str]]:
    """The decoder's dictionary text for `words`, and the words nobody can pronounce.

    Each word gets the bundled pronunciation, then `extra`'s, each with its telephone
    variant (`word(2)`, `word(3)`...), without repeats.
    """
    lines: list[str] = []
    missing: list[str] = []
    for word in sorted(set(words)):
        given = [bundled[word]] if word in bundled else []
        given += list(extra.get(word, ()))
        if not given:
            missing.append(word)
            continue
        variants = dict.fromkeys(
            v for phones in given for v in telephone_variants(phones.split())
        )
        for i, variant in enumerate(variants):
            label = word if i == 0 else f"{word}({i + 1})"
            lines.append(f"{label} {' '.join(variant)}")
    return "".join(f"{line}\n" for line in lines), missing
