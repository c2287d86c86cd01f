"""Who Plivo is: its V3 webhook signatures, and the key of Plivo call tickets.

Plivo signs its requests with `X-Plivo-Signature-V3` (base64 HMAC-SHA256 with the auth
token) over the URL and its parameters, then `.` and the `X-Plivo-Signature-V3-Nonce`; the
header may list several signatures, comma-separated (one per auth token in use).
`v3_base_url` builds the signed string exactly as the official `plivo` SDK's
`validate_v3_signature` does (query keys sorted, each `key=value` joined with `&`; for a
POST, `.` then each sorted form key followed by its sorted values), and the tests check it
against the SDK.

Plivo does not sign the audio stream's WebSocket, so the signed answer webhook issues a
call ticket (`trust.issue_ticket`, keyed from `PLIVO_AUTH_TOKEN`) that the stream's `start`
must carry in its `extra_headers`, as for Twilio. Without `PLIVO_AUTH_TOKEN` nothing is
checked and only local requests may use the webhook or open a session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit, urlunsplit

from libs.config import env_str

SIGNATURE_HEADER = "x-plivo-signature-v3"
NONCE_HEADER = "x-plivo-signature-v3-nonce"
_TICKET_LABEL = b"holdline plivo call ticket v1"


def _grouped(pairs: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for key, value in pairs:
        values.setdefault(key, []).append(value)
    return values


def _query_string(values: dict[str, list[str]]) -> str:
    return "&".join(
        "&".join(f"{key}={value}" for value in sorted(values[key])) for key in sorted(values)
    )


def v3_base_url(method: str, url: str, params: Sequence[tuple[str, str]]) -> str:
    """The string Plivo's V3 signature covers, before `.nonce`."""
    parts = urlsplit(url)
    base = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    query = _grouped(
        [(k, v) for k, vs in parse_qs(parts.query, keep_blank_values=True).items() for v in vs]
    )
    if method.upper() == "GET":
        # The query's values replace the parameters' of the same name.
        merged = {**_grouped(params), **query}
        text = _query_string(merged)
        return f"{base}?{text}" if text else base
    text = _query_string(query)
    if not params:
        return f"{base}?{text}" if text else base
    base = f"{base}?{text}." if text else f"{base}?"
    form = _grouped(params)
    return base + "".join(
        "".join(f"{key}{value}" for value in sorted(form[key])) for key in sorted(form)
    )


def v3_signature(auth_token: str, method: str, url: str,
                 params: Sequence[tuple[str, str]], nonce: str) -> str:
    """Plivo's `X-Plivo-Signature-V3` for this request."""
    message = f"{v3_base_url(method, url, params)}.{nonce}".encode()
    digest = hmac.new(auth_token.encode(), message, hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


@dataclass(frozen=True)
class PlivoTrust:
    """What the Plivo edge trusts; see the module docstring."""

    # PLIVO_AUTH_TOKEN: the (sub)account's auth token, which checks Plivo's V3 signatures and
    # keys Plivo call tickets; unset, only local requests may use the Plivo webhook or open
    # a Plivo call.
    auth_token: str = ""

    @property
    def signed(self) -> bool:
        """Whether Plivo requests are checked (otherwise only local ones are served)."""
        return bool(self.auth_token)

    @property
    def ticket_key(self) -> bytes:
        """The tickets' HMAC key, derived from the auth token."""
        return hmac.new(self.auth_token.encode(), _TICKET_LABEL, hashlib.sha256).digest()

    def verify(self, method: str, url: str, params: Sequence[tuple[str, str]],
               nonce: str | None, presented: str | None) -> bool:
        """Whether `presented` lists Plivo's V3 signature of this request."""
        if not self.signed or not nonce or not presented:
            return False
        expected = v3_signature(self.auth_token, method, url, params, nonce)
        return any(hmac.compare_digest(expected.encode(), candidate.encode())
                   for candidate in presented.split(","))

    def problems(self) -> list[str]:
        """What is misconfigured, one sentence each (logged at start-up)."""
        if self.signed:
            return []
        return ["PLIVO_AUTH_TOKEN is not set: Plivo requests cannot be authenticated, so "
                "only local requests may use the Plivo webhook or open a Plivo call"]


def plivo_trust_from_env() -> PlivoTrust:
    """`PLIVO_AUTH_TOKEN`."""
    return PlivoTrust(auth_token=env_str("PLIVO_AUTH_TOKEN", ""))
