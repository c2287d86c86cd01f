"""The `[tools.http]` table of a tools-file entry → the `HttpSpec` its executor runs on.

Endpoints, the lookup a lost answer needs, retryable statuses, the states of a polled
answer and signed callbacks, each checked with a message naming the field (§7b).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from .file_entry import FileEntry, read_table, read_typed, with_env
from .http import (
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_RETRYABLE,
    Callbacks,
    Endpoint,
    HttpSpec,
    States,
)
from .templates import Template, TemplateError

IDENTITY_FIELDS = frozenset({"holdline.tenant", "holdline.user"})
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
_HEADER = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_HTTP = frozenset(
    {
        "execute", "lookup", "cancel", "retryable", "id_field", "status", "callback",
        "max_response_bytes", "headers", "identity_secret_env",
    }
)
_STATUS = frozenset({"field", "pending", "failed", "cancelled"})
_CALLBACK = frozenset(
    {"secret_env", "signature_header", "timestamp_header", "key_field", "result_field"}
)


def _endpoint(
    entry: FileEntry, raw: Any, field: str, allowed: set[str], *, mutation: bool
) -> Endpoint:
    keys = {"method", "url"} | ({"idempotency_header"} if mutation else set())
    table = read_table(entry, raw, field, frozenset(keys))
    method = str(table.get("method", "POST" if mutation else "GET")).upper()
    if method not in _METHODS:
        raise entry.error(
            f"{field}.method", f"{method!r} is not one of {', '.join(sorted(_METHODS))}"
        )
    url = table.get("url")
    if not isinstance(url, str) or not url:
        raise entry.error(f"{field}.url", "required")
    try:
        template = Template(with_env(entry, f"{field}.url", url))
    except TemplateError as exc:
        raise entry.error(f"{field}.url", str(exc)) from None
    if not template.text.startswith(("http://", "https://")):
        raise entry.error(f"{field}.url", "must be an absolute http:// or https:// URL")
    in_origin = template.origin_fields()
    if in_origin:
        # A value chosen by the model must not choose where the request (and its
        # credentials) goes: fields fill the path and the query only.
        raise entry.error(
            f"{field}.url",
            f"{{{in_origin[0]}}} is in the scheme or host; fields may fill the path and query only",
        )
    # The session's tenant and user (identity_headers.py) may fill the path and query too.
    unknown = template.unknown(allowed | IDENTITY_FIELDS, result=field.endswith("cancel"))
    if unknown:
        raise entry.error(f"{field}.url", f"{{{unknown[0]}}} is not an argument of the tool")
    header = table.get("idempotency_header", "Idempotency-Key") if mutation else None
    if header is not None and (not isinstance(header, str) or not _HEADER.match(header)):
        raise entry.error(f"{field}.idempotency_header", "must be a header name")
    return Endpoint(method, template, header)


def _strings(
    entry: FileEntry, raw: Mapping[str, Any], field: str, default: frozenset[str]
) -> frozenset[str]:
    value = raw.get(field)
    if value is None:
        return default
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise entry.error(field, "must be a list of strings")
    return frozenset(v.lower() for v in value)


def _headers(entry: FileEntry, raw: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, dict):
        raise entry.error("http.headers", "must be a table of header names to values")
    headers = []
    for name, value in raw.items():
        if not _HEADER.match(name):
            raise entry.error(f"http.headers.{name}", "not a header name")
        if not isinstance(value, str):
            raise entry.error(f"http.headers.{name}", "must be a string")
        filled = with_env(entry, f"http.headers.{name}", value)
        if any(c in filled for c in "\r\n\x00"):
            # Named, not shown: the value is likely a credential.
            raise entry.error(f"http.headers.{name}", "its value holds a line break")
        headers.append((name, filled))
    return tuple(headers)


def http_spec(
    entry: FileEntry,
    raw: Any,
    arguments: set[str],
    decl: Mapping[str, Any],
    *,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> HttpSpec:
    """The `[tools.http]` table; `max_response_bytes` is the process's default cap."""
    if raw is None:
        raise entry.error("http", "required: [tools.http] with execute and lookup")
    table = read_table(entry, raw, "http", _HTTP)
    if "execute" not in table:
        raise entry.error("http.execute", "required")
    execute = _endpoint(entry, table["execute"], "http.execute", arguments, mutation=True)
    keyed = arguments | {"idempotency_key"}
    lookup = cancel = None
    if "lookup" in table:
        lookup = _endpoint(entry, table["lookup"], "http.lookup", keyed, mutation=False)
        if "idempotency_key" not in lookup.url.fields:
            raise entry.error("http.lookup.url", "must contain {idempotency_key}")
    elif not decl.get("read_only", False):
        raise entry.error(
            "http.lookup", "required: a lost answer is looked up before anything is sent again"
        )
    if "cancel" in table:
        cancel = _endpoint(entry, table["cancel"], "http.cancel", keyed, mutation=True)
    if decl.get("cancellable", False) and cancel is None:
        raise entry.error("http.cancel", "required when cancellable = true")
    retryable = table.get("retryable", sorted(DEFAULT_RETRYABLE))
    if not isinstance(retryable, list) or not all(
        isinstance(s, int) and 400 <= s <= 599 for s in retryable
    ):
        raise entry.error("http.retryable", "must be a list of HTTP statuses 400-599")
    states = States()
    if "status" in table:
        st = read_table(entry, table["status"], "http.status", _STATUS)
        states = States(
            field=read_typed(entry, st, "field", str, states.field),
            pending=_strings(entry, st, "pending", states.pending),
            failed=_strings(entry, st, "failed", states.failed),
            cancelled=_strings(entry, st, "cancelled", states.cancelled),
        )
    callbacks = None
    if "callback" in table:
        cb = read_table(entry, table["callback"], "http.callback", _CALLBACK)
        secret_env = cb.get("secret_env")
        if not isinstance(secret_env, str) or not secret_env:
            raise entry.error(
                "http.callback.secret_env", "required: the variable holding the secret"
            )
        secret = os.environ.get(secret_env, "")
        if not secret:
            raise entry.error(
                "http.callback.secret_env", f"environment variable {secret_env} is not set"
            )
        header = cb.get("signature_header")
        if not isinstance(header, str) or not _HEADER.match(header):
            raise entry.error("http.callback.signature_header", "required: a header name")
        stamp = cb.get("timestamp_header")
        if stamp is not None and (not isinstance(stamp, str) or not _HEADER.match(stamp)):
            raise entry.error("http.callback.timestamp_header", "must be a header name")
        callbacks = Callbacks(
            secret=secret.encode(),
            signature_header=header,
            timestamp_header=stamp,
            key_field=read_typed(entry, cb, "key_field", str, "idempotency_key"),
            result_field=read_typed(entry, cb, "result_field", str, ""),
        )
    return HttpSpec(
        execute=execute,
        lookup=lookup,
        cancel=cancel,
        retryable=frozenset(retryable),
        states=states,
        id_field=read_typed(entry, table, "id_field", str, "id"),
        callbacks=callbacks,
        max_response_bytes=_max_bytes(entry, table, max_response_bytes),
        headers=_headers(entry, table.get("headers", {})),
        identity_secret=_secret(entry, table),
    )


def _secret(entry: FileEntry, table: Mapping[str, Any]) -> bytes | None:
    """`identity_secret_env`: the variable holding the key the identity headers are signed
    with (unset: they go unsigned); a variable that is not set stops the declaration."""
    name = table.get("identity_secret_env")
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise entry.error("http.identity_secret_env", "must name an environment variable")
    secret = os.environ.get(name, "")
    if not secret:
        raise entry.error("http.identity_secret_env", f"environment variable {name} is not set")
    return secret.encode()


def _max_bytes(entry: FileEntry, table: Mapping[str, Any], default: int) -> int:
    value = read_typed(entry, table, "max_response_bytes", int, default)
    if value < 1:
        raise entry.error("http.max_response_bytes", "must be 1 or more")
    return int(value)
