"""The struct bases every stream's events and their nested parts share.

`gc=False`: msgspec never registers an instance with CPython's cyclic collector (why that is
safe and what it saves: libs/events/__init__.py).
"""

from __future__ import annotations

import msgspec


class StreamEvent(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="type",
    gc=False,
):
    """An event of one stream's tagged union; each kind names its own dotted tag."""


class EventPart(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """A struct nested inside an event."""
