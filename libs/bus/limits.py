"""Size and age limits of the streams, chosen so that no limit ever drops an event of an
operation (or of anything else) that is not finished.

- The event streams (interaction, control, operations, batches, deliveries) and the work
  queue: at most `max_bytes` / `max_msgs` each, with discard policy *new*: a full stream
  refuses the next append (the writer sees the broker's error and nothing is stored), and
  never removes a stored event. No age limit: an operation may stay pending for days (a
  provider's callback, a confirmation), and its history must outlive it.
- Dead letters: an age limit (`dlq_max_age_s`) with discard policy *old*. A dead letter is a
  copy kept for operators; the event it copies stays in its own stream, so dropping an old
  dead letter loses no operation's state.

docs/guides/erasure-and-limits.md lists each stream's limit and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from libs.config import env_float, env_int


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """Every stream's limits (unlimited by default but for the dead letters' age)."""

    # Largest size in bytes of each event stream and of the work queue; a full stream refuses
    # new appends (discard new) and never drops a stored event; -1 = unlimited. The broker
    # reserves this much storage per stream, so it must fit its disk.
    max_bytes: int = -1
    # Most messages each event stream and the work queue hold, refused beyond as for
    # `HOLDLINE_STREAM_MAX_BYTES`; -1 = unlimited.
    max_msgs: int = -1
    # Dead letters older than this (seconds) are dropped (they are copies: the event stays in
    # its own stream); 0 = kept for ever.
    dlq_max_age_s: float = 30 * 86400.0

    @classmethod
    def from_env(cls) -> StreamLimits:
        """`HOLDLINE_STREAM_MAX_BYTES`, `HOLDLINE_STREAM_MAX_MSGS`, `HOLDLINE_DLQ_MAX_AGE_S`."""
        return cls(
            max_bytes=env_int("HOLDLINE_STREAM_MAX_BYTES", -1),
            max_msgs=env_int("HOLDLINE_STREAM_MAX_MSGS", -1),
            dlq_max_age_s=env_float("HOLDLINE_DLQ_MAX_AGE_S", 30 * 86400.0),
        )
