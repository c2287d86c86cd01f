"""Who may open a phone session: Twilio signatures, call tickets and the local-only rule.

Twilio signs only the WebSocket URL of a Media Stream, so its signature is one fixed value
for the life of the auth token and proves nothing about a given call. The signed voice
webhook therefore issues a *call ticket*: an HMAC (a key derived from the auth token) over
the CallSid, the stream's `<Parameter>`s and an expiry a few minutes ahead. A stream's
`start` must carry a valid, unexpired ticket to open a session (claimed once in a KV bucket,
so a replay fails on any surface), or the session's token to continue one.

Signatures are checked as Twilio's own `RequestValidator` checks them: the URL with and
without its default port, every value of a repeated form key, HMAC-SHA1 with the auth token
or, with `X-Twilio-Webhooks-Signature-Settings`, the algorithm it names (HMAC-SHA256) with
the named shared key. The URL Twilio signed is the public one: `HOLDLINE_PUBLIC_URL`, or
the `X-Forwarded-Proto/Host/Port` of a peer in `HOLDLINE_TRUSTED_PROXIES`, or the request
as it arrived. Without `TWILIO_AUTH_TOKEN` nothing can be checked, so only local requests
(a loopback peer, no forwarding header) may use the webhook or open a session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

SIGNATURE_HEADER = "x-twilio-signature"
SETTINGS_HEADER = "x-twilio-webhooks-signature-settings"
TICKET = "ticket"
HMAC_SHA1 = "HMAC_SHA1"
HMAC_SHA256 = "HMAC_SHA256"
_HASHES = {HMAC_SHA1: hashlib.sha1, HMAC_SHA256: hashlib.sha256}
_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}
# Headers a proxy adds: a request carrying one came through a proxy and is not local.
_FORWARDING = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto",
               "x-real-ip")
_TICKET_VERSION = "v1"
_TICKET_LABEL = b"holdline call ticket v1"
# What a `start` may carry: Twilio passes the TwiML's few short `<Parameter>`s.
MAX_PARAMETERS = 16
MAX_PARAMETER_CHARS = 512
# Replay claims outlive the ticket by this much, so surfaces whose clocks differ still agree.
CLAIM_MARGIN_S = 60.0

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TelephonyMisconfigured(RuntimeError):
    """The telephony settings cannot be used (the surface refuses to start)."""


# ---------------------------------------------------------------------- signatures


def signature_payload(url: str, params: Sequence[tuple[str, str]]) -> str:
    """The signed string: the URL, then each key (sorted) with each of its distinct values
    (sorted), as Twilio's validator builds it."""
    values: dict[str, set[str]] = {}
    for key, value in params:
        values.setdefault(key, set()).add(value)
    return url + "".join(key + value for key in sorted(values) for value in sorted(values[key]))


def compute_signature(
    secret: str, url: str, params: Sequence[tuple[str, str]], algorithm: str = HMAC_SHA1
) -> str:
    """Base64 HMAC of the signed string (SHA-1 by default, SHA-256 when named)."""
    digest = hmac.new(
        secret.encode(), signature_payload(url, params).encode(), _HASHES[algorithm]
    ).digest()
    return base64.b64encode(digest).decode()


def url_forms(url: str) -> tuple[str, ...]:
    """The URL without any port and with its default port: Twilio signs either form."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    userinfo = parts.netloc.rpartition("@")[0]
    prefix = f"{userinfo}@" if userinfo else ""
    bare = urlunsplit(parts._replace(netloc=prefix + host))
    if parts.port is not None:
        return (bare, url) if bare != url else (url,)
    default = _DEFAULT_PORTS.get(parts.scheme.lower())
    if default is None:
        return (url,)
    return (bare, urlunsplit(parts._replace(netloc=f"{prefix}{host}:{default}")))


def signature_settings(header: str | None) -> tuple[str, str | None]:
    """(algorithm, shared key id) from `X-Twilio-Webhooks-Signature-Settings`; none means
    the auth token's HMAC-SHA1."""
    algorithm, key_id = HMAC_SHA1, None
    for part in (header or "").split(","):
        name, sep, value = part.partition("=")
        if not sep or not value.strip():
            continue
        if name.strip() == "algorithm":
            algorithm = value.strip().upper()
        elif name.strip() == "key":
            key_id = value.strip()
    return algorithm, key_id


# ---------------------------------------------------------------------- settings


def parse_networks(raw: str) -> tuple[Network, ...]:
    found: list[Network] = []
    for item in raw.split(","):
        if not item.strip():
            continue
        try:
            found.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError:
            raise TelephonyMisconfigured(
                f"HOLDLINE_TRUSTED_PROXIES: {item.strip()!r} is not an IP address or network"
            ) from None
    return tuple(found)


def parse_shared_keys(raw: str) -> dict[str, str]:
    keys: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key_id, sep, secret = item.strip().partition(":")
        if not sep or not key_id or not secret:
            raise TelephonyMisconfigured(
                "TWILIO_WEBHOOK_SHARED_KEYS: expected key_id:secret[,key_id:secret]"
            )
        keys[key_id] = secret
    return keys


@dataclass(frozen=True)
class TrustSettings:
    """What the telephony edge trusts; see the module docstring."""

    # TWILIO_AUTH_TOKEN: checks Twilio's signatures; unset, only local requests may use the voice
    # webhook or open a phone session.
    auth_token: str = ""
    # Shared-key secrets for `X-Twilio-Webhooks-Signature-Settings: key=<id>`, by id.
    shared_keys: Mapping[str, str] = field(default_factory=dict)
    # HOLDLINE_PUBLIC_URL: the https base URL Twilio calls (the URL it signs).
    public_url: str = ""
    # HOLDLINE_TRUSTED_PROXIES: proxies (addresses or networks) whose `X-Forwarded-Proto/Host/Port`
    # give the public URL.
    trusted_proxies: tuple[Network, ...] = ()
    # How long a call ticket issued by the voice webhook stays valid.
    ticket_ttl_s: float = 300.0

    @property
    def signed(self) -> bool:
        """Whether requests are checked (otherwise only local ones are served)."""
        return bool(self.auth_token)

    @property
    def ticket_key(self) -> bytes:
        """The tickets' HMAC key: derived, so every surface with the token agrees on it."""
        return hmac.new(self.auth_token.encode(), _TICKET_LABEL, hashlib.sha256).digest()

    def problems(self) -> list[str]:
        """What is misconfigured, one sentence each (logged at start-up)."""
        found: list[str] = []
        if not self.auth_token:
            found.append(
                "TWILIO_AUTH_TOKEN is not set: Twilio requests cannot be authenticated, so "
                "only local (loopback, unproxied) requests may use the voice webhook or open "
                "a phone session"
            )
        if self.shared_keys and not self.auth_token:
            found.append(
                "TWILIO_WEBHOOK_SHARED_KEYS is set without TWILIO_AUTH_TOKEN: call tickets need "
                "the auth token, so nothing is checked and only local requests are served"
            )
        if self.public_url:
            parts = urlsplit(self.public_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                found.append(
                    f"HOLDLINE_PUBLIC_URL={self.public_url!r} is not an http(s) base URL"
                )
            elif parts.scheme != "https":
                found.append(
                    "HOLDLINE_PUBLIC_URL is not https: the TwiML stream URL will be ws://, "
                    "which Twilio refuses (error 31922)"
                )
            if parts.path or parts.query:
                found.append("HOLDLINE_PUBLIC_URL must be a base URL without a path or query")
        elif self.auth_token and not self.trusted_proxies:
            found.append(
                "neither HOLDLINE_PUBLIC_URL nor HOLDLINE_TRUSTED_PROXIES is set: behind a "
                "proxy that terminates TLS, Twilio's signatures over the public https URL "
                "will not match and the TwiML will point the stream at ws://"
            )
        return found

    def verify(
        self,
        url: str,
        params: Sequence[tuple[str, str]],
        signature: str | None,
        settings_header: str | None = None,
    ) -> bool:
        """Whether `signature` is Twilio's for this URL and these (repeatable) parameters."""
        if not signature:
            return False
        algorithm, key_id = signature_settings(settings_header)
        if algorithm not in _HASHES:
            return False
        if settings_header and key_id is not None:
            secret = self.shared_keys.get(key_id)
            if secret is None:
                return False
        else:
            secret = self.auth_token
        if not secret:
            return False
        return any(
            hmac.compare_digest(compute_signature(secret, form, params, algorithm), signature)
            for form in url_forms(url)
        )


# ---------------------------------------------------------------------- the public URL


def _ip(peer: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not peer:
        return None
    try:
        return ipaddress.ip_address(peer)
    except ValueError:
        return None


def is_local(peer: str | None, headers: Mapping[str, str]) -> bool:
    """A loopback peer with no forwarding header: a local process, not a proxied caller."""
    address = _ip(peer)
    if address is None or not address.is_loopback:
        return False
    return not any(name in headers for name in _FORWARDING)


def _first(value: str | None) -> str:
    return (value or "").split(",")[0].strip()


def public_url(
    settings: TrustSettings, url: str, peer: str | None, headers: Mapping[str, str]
) -> str:
    """The URL the caller (Twilio) used for this request: what its signature covers.

    `url` is the request as it arrived (`http(s)://` or `ws(s)://`); its path and query are
    kept. The scheme keeps its kind (ws stays ws) and follows TLS at the public edge.
    """
    parts = urlsplit(url)
    websocket = parts.scheme in ("ws", "wss")
    if settings.public_url:
        base = urlsplit(settings.public_url)
        scheme, netloc = base.scheme, base.netloc
    else:
        scheme, netloc = parts.scheme, parts.netloc
        address = _ip(peer)
        if address is not None and any(address in net for net in settings.trusted_proxies):
            proto = _first(headers.get("x-forwarded-proto")).lower()
            if proto in _DEFAULT_PORTS:
                scheme = proto
            host = _first(headers.get("x-forwarded-host"))
            if host:
                netloc = host
            port = _first(headers.get("x-forwarded-port"))
            if port.isdigit() and not urlsplit(f"//{netloc}").port:
                netloc = f"{netloc}:{port}"
    secure = scheme in ("https", "wss")
    scheme = ("wss" if secure else "ws") if websocket else ("https" if secure else "http")
    # A port that is the scheme's default is not part of what was typed.
    split = urlsplit(f"//{netloc}")
    if split.port is not None and split.port == _DEFAULT_PORTS[scheme]:
        netloc = netloc.rsplit(":", 1)[0]
    return urlunsplit((scheme, netloc, parts.path, parts.query, ""))


def stream_url(webhook_url: str, path: str) -> str:
    """The Media Stream URL for the TwiML: the webhook's public origin, ws(s) at `path`."""
    parts = urlsplit(webhook_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, path, "", ""))


# ---------------------------------------------------------------------- call tickets


class TicketRefused(Exception):
    """A ticket that opens nothing; `reason` is the recorded code."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _ticket_mac(
    key: bytes, call_sid: str, params: Mapping[str, str], expires: int, nonce: str
) -> str:
    bound = {k: v for k, v in params.items() if k != TICKET}
    message = json.dumps(
        [_TICKET_VERSION, call_sid, expires, nonce, sorted(bound.items())],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    digest = hmac.new(key, message.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def issue_ticket(
    key: bytes, call_sid: str, params: Mapping[str, str], *, now: float, ttl_s: float
) -> str:
    """A ticket for this call and these parameters, valid for `ttl_s` from `now` (epoch s)."""
    expires = int(now + ttl_s)
    nonce = secrets.token_hex(12)
    return ".".join(
        (_TICKET_VERSION, str(expires), nonce, _ticket_mac(key, call_sid, params, expires, nonce))
    )


def check_ticket(
    key: bytes, ticket: str, call_sid: str, params: Mapping[str, str], *, now: float
) -> str:
    """The ticket's nonce (its replay key) when it is ours, for this call and these
    parameters, and unexpired; otherwise TicketRefused."""
    pieces = ticket.split(".")
    if len(pieces) != 4 or pieces[0] != _TICKET_VERSION or not pieces[1].isdigit():
        raise TicketRefused("ticket_malformed")
    _, expires_raw, nonce, mac = pieces
    if len(nonce) != 24 or any(c not in "0123456789abcdef" for c in nonce):
        raise TicketRefused("ticket_malformed")
    expires = int(expires_raw)
    expected = _ticket_mac(key, call_sid, params, expires, nonce)
    if not hmac.compare_digest(expected.encode(), mac.encode()):
        # Forged, or issued for another call or other parameters.
        raise TicketRefused("ticket_invalid")
    if now > expires:
        raise TicketRefused("ticket_expired")
    return nonce


def form_pairs(raw: bytes) -> list[tuple[str, str]]:
    """Every (key, value) of a form body, repeated keys included; UnicodeDecodeError on
    bytes that are not UTF-8."""
    return parse_qsl(raw.decode("utf-8"), keep_blank_values=True, errors="strict")


def text_params(custom: Any) -> dict[str, str] | None:
    """`customParameters` as strings, or None when it is not a small object of scalars."""
    if not isinstance(custom, dict):
        return {} if custom is None else None
    if len(custom) > MAX_PARAMETERS:
        return None
    out: dict[str, str] = {}
    for key, value in custom.items():
        if isinstance(value, str):
            text = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            text = str(value)
        else:
            return None
        if len(key) > MAX_PARAMETER_CHARS or len(text) > MAX_PARAMETER_CHARS:
            return None
        out[str(key)] = text
    return out
