"""The client's inbox prefix: where the broker sends its replies and deliveries."""

from __future__ import annotations

from collections.abc import Mapping

from libs.config import env_str


def inbox_prefix(environ: Mapping[str, str] | None = None) -> str:
    """The client's inbox prefix (nats-py's default unless set)."""
    # HOLDLINE_NATS_INBOX_PREFIX: the prefix of this client's inboxes (replies, deliveries), for
    # a broker that lets each user subscribe only to its own (`_INBOX_<user>`; `make
    # run-cluster` sets it per service). Default: `_INBOX`, shared by every client.
    return env_str("HOLDLINE_NATS_INBOX_PREFIX", "_INBOX", environ)
