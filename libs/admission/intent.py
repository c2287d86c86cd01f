"""Intent and subject keys: the same human request always hashes to the same key.

`tool_call_id` is deliberately absent: two model calls with different ids can be one intent.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

_CANONICAL = msgspec.json.Encoder(order="sorted")


def canonical(arguments: dict[str, Any]) -> bytes:
    """Arguments as canonical JSON (sorted keys), the input of every digest."""
    return _CANONICAL.encode(arguments)


def digest(arguments: dict[str, Any]) -> str:
    """A short digest of normalised arguments."""
    return hashlib.sha256(canonical(arguments)).hexdigest()[:32]


def intent_key(tenant_id: str, user_id: str, tool: str, arguments: dict[str, Any]) -> str:
    """hash(tenant, user, tool, normalised arguments of one item)."""
    material = b"\x1f".join(
        (tenant_id.encode(), user_id.encode(), tool.encode(), canonical(arguments))
    )
    return "ik_" + hashlib.sha256(material).hexdigest()[:40]


def subject_key(
    tenant_id: str, user_id: str, tool: str, fields: tuple[str, ...], arguments: dict[str, Any]
) -> str | None:
    """What an intent is about (e.g. restaurant + date), so a newer intent can supersede it."""
    if not fields:
        return None
    named = {f: arguments.get(f) for f in fields}
    material = b"\x1f".join((tenant_id.encode(), user_id.encode(), tool.encode(), canonical(named)))
    return "sk_" + hashlib.sha256(material).hexdigest()[:24]
