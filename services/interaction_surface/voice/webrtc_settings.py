"""`WebRtcSettings`: the browser voice edge's environment (DESIGN §6d), read once at start-up.

`HOLDLINE_ICE_SERVERS` lists the STUN/TURN servers a peer connection gathers candidates
with: either a JSON array of `RTCIceServer` objects (`[{"urls": "turn:turn.example:3478",
"username": "u", "credential": "p"}]`) or a comma-separated list of URLs
(`stun:stun.example:3478,turn:u:p@turn.example:3478`). Empty (the default): host candidates
only, which is all a browser on the same host or network needs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from libs.config import env_float, env_int, env_str

from .trust import TelephonyMisconfigured


@dataclass(frozen=True, slots=True)
class IceServer:
    """One STUN or TURN server (as a browser's `RTCIceServer`)."""

    urls: tuple[str, ...]
    username: str | None = None
    credential: str | None = None


def parse_ice_servers(raw: str) -> tuple[IceServer, ...]:
    """`HOLDLINE_ICE_SERVERS` as servers; TelephonyMisconfigured when it cannot be read."""
    raw = raw.strip()
    if not raw:
        return ()
    if raw.startswith("["):
        try:
            items = json.loads(raw)
            return tuple(_server(item) for item in items)
        except (ValueError, TypeError, KeyError) as exc:
            raise TelephonyMisconfigured(f"HOLDLINE_ICE_SERVERS is not valid: {exc}") from None
    servers = []
    for url in (part.strip() for part in raw.split(",")):
        if not url:
            continue
        scheme, _, rest = url.partition(":")
        if scheme not in ("stun", "stuns", "turn", "turns") or not rest:
            raise TelephonyMisconfigured(f"HOLDLINE_ICE_SERVERS: not a STUN/TURN URL: {url}")
        user, at, host = rest.rpartition("@")
        if at:
            name, _, secret = user.partition(":")
            servers.append(IceServer((f"{scheme}:{host}",), name or None, secret or None))
        else:
            servers.append(IceServer((url,)))
    return tuple(servers)


def _server(item: dict[str, object]) -> IceServer:
    urls = item["urls"]
    listed = (urls,) if isinstance(urls, str) else tuple(str(u) for u in urls)  # type: ignore[attr-defined]
    username, credential = item.get("username"), item.get("credential")
    return IceServer(
        listed,
        str(username) if username is not None else None,
        str(credential) if credential is not None else None,
    )


@dataclass(frozen=True, slots=True)
class WebRtcSettings:
    """The WebRTC edge's settings (`webrtc_from_env`)."""

    # STUN/TURN servers for peer connections behind NAT: a JSON array of RTCIceServer
    # objects or comma-separated `stun:`/`turn:` URLs (`turn:user:pass@host:port`); empty:
    # host candidates only.
    ice_servers: tuple[IceServer, ...] = ()
    # A peer that sends no audio for this long is gone (it vanished without closing): its
    # call ends, recorded as `peer_vanished`.
    media_timeout_s: float = 10.0
    # Audio packets the receiver holds before handing the oldest to the call (aiortc's own
    # default is 4: 80 ms more before the VAD hears the caller). 1 adds 20 ms; more only
    # saves a packet that arrives out of order (a lost packet is a 20 ms gap).
    jitter_packets: int = 1


def webrtc_from_env() -> WebRtcSettings:
    """`HOLDLINE_ICE_SERVERS`, `HOLDLINE_WEBRTC_MEDIA_TIMEOUT_S`,
    `HOLDLINE_WEBRTC_JITTER_PACKETS`."""
    settings = WebRtcSettings(
        ice_servers=parse_ice_servers(env_str("HOLDLINE_ICE_SERVERS", "")),
        media_timeout_s=env_float("HOLDLINE_WEBRTC_MEDIA_TIMEOUT_S", 10.0),
        jitter_packets=env_int("HOLDLINE_WEBRTC_JITTER_PACKETS", 1),
    )
    if settings.media_timeout_s <= 0:
        raise TelephonyMisconfigured("HOLDLINE_WEBRTC_MEDIA_TIMEOUT_S must be positive")
    if not 1 <= settings.jitter_packets <= 8:
        raise TelephonyMisconfigured("HOLDLINE_WEBRTC_JITTER_PACKETS must be 1 to 8")
    return settings
