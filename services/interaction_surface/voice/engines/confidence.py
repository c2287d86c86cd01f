"""How sure the offline recognizer is of a word: pure functions over its decoder's evidence.

A domain language model forces any audio onto its phrases: an out-of-catalogue or misheard
name comes out as a catalogue name, and the lattice posterior of that name alone is often
1.0 (the model knows no alternative). Two more pieces of evidence expose it, both from the
same decode:

- n-best agreement: of the decoder's best hypotheses (`NBEST`), those that hold the word
  against those that hold, instead, a catalogue name the best one lacks (a rival name). A
  name the acoustics do not settle changes from one hypothesis to the next; a hypothesis
  that only differs in a filler ("to to", "uh") or a non-name word takes no side.
- duration: a word stretched over more frames per phone than speech has
  (`MAX_FRAMES_PER_PHONE`) swallowed audio it does not explain (a longer or other name,
  noise); it is not trusted at all.

A word's confidence is posterior times agreement, or 0 when stretched. The constants are
calibrated on the telephone speech corpus's calibration split (bench/speech.py, seed 11)
against the voice floor's default threshold (`HOLDLINE_STT_CONFIRM_BELOW`, 0.6), and checked
on the held-out split (seed 7): bench/results/speech.json holds the trade-off curve.
"""

from __future__ import annotations

from collections.abc import Sequence

# How many of the decoder's best hypotheses vote on each word.
NBEST = 10
# 10 ms frames per phone above which a word is taken as stretched over audio it does not
# explain (speech runs at about 4-9; a misheard last name that swallows the noise after it,
# 12-20). Calibrated: the largest limit with no wrong admission on the calibration split at
# any floor threshold from 0.5 to 0.8 (12 lets three through at 0.5).
MAX_FRAMES_PER_PHONE = 10.0


def base_word(token: str) -> str:
    """A dictionary entry's word: a pronunciation variant is the same word ("slack(2)")."""
    return token.partition("(")[0]


def agreement(
    word: str, hypotheses: Sequence[str], names: frozenset[str] = frozenset(), best: str = ""
) -> float:
    """The share of the hypotheses that hold `word`, among those that hold it or a rival
    name (one of `names` the transcript `best` lacks; the first hypothesis by default);
    1.0 when none takes a side. Without `names`, every hypothesis takes a side."""
    if not hypotheses:
        return 1.0
    chosen = set((best or hypotheses[0]).split())
    held = against = 0
    for hypothesis in hypotheses:
        words = hypothesis.split()
        if word in words:
            held += 1
        elif not names or any(w in names and w not in chosen for w in words):
            against += 1
    return held / (held + against) if held + against else 1.0


def stretched(frames: int, phones: int, limit: float = MAX_FRAMES_PER_PHONE) -> bool:
    """Whether a word lasts longer than its phones can (frames per phone above `limit`)."""
    return phones > 0 and frames / phones > limit


def word_confidence(
    posterior: float,
    *,
    frames: int,
    phones: int,
    hypotheses: Sequence[str],
    word: str,
    names: frozenset[str] = frozenset(),
    best: str = "",
    limit: float = MAX_FRAMES_PER_PHONE,
) -> float:
    """The word's confidence (0-1): posterior times n-best agreement (against rival `names`),
    0 when stretched."""
    if stretched(frames, phones, limit):
        return 0.0
    return max(0.0, min(1.0, posterior)) * agreement(word, hypotheses, names, best)
