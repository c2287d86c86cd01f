"""interaction-surface settings, from the environment.

- `INTERACTION_SURFACE_HOST` / `INTERACTION_SURFACE_PORT` (127.0.0.1:8080) and
  `HOLDLINE_LOG_LEVEL` (INFO): how `libs.serve` runs it (`ServeSettings`)
- `HOLDLINE_TENANT_API_KEYS` `tenant:key,...`: a tenant's key in `X-Api-Key` opens its
  sessions (the key decides the tenant); `HOLDLINE_JWT_*` (`JwtSettings`): a tenant-signed
  JWT in `Authorization: Bearer` does too (identity.py). Without either, only local
  requests open sessions, and a surface listening off loopback refuses to start
  (`Misconfigured`) unless `HOLDLINE_INSECURE_OPEN=1`
- `HOLDLINE_DEFAULT_TENANT` (`default`), `HOLDLINE_DEFAULT_AGENT` (`concierge`)
- `HOLDLINE_HANDOFF_CONTEXT` `carried|fresh` (`carried`): what the new agent's model sees
- `HOLDLINE_MAX_BODY_BYTES` (16384), `HOLDLINE_MAX_TEXT_CHARS` (2000)
- `HOLDLINE_MODEL_TIMEOUT_S` (8): a model slower than this is a failed turn, answered honestly
- `HOLDLINE_TURN_TIMEOUT_S` (30): an open turn older than this was abandoned by a crash, and
  so was a `client_turn_id` or `tool_call_id` claim still pending after it (a repeat takes it)
- `HOLDLINE_TURN_WAIT_S` (10): how long a turn waits for the session's previous turn
- `HOLDLINE_DEMO` (unset: on when no tools are configured, `libs.modes`): demo mode adds
  the demo's routes (its fault-injection proxy, `/v1/demo/faults`), tools and mock model
- `HOLDLINE_SURFACE_ROUTES` `module:function,...` (empty): extra route installers, each
  called as `function(router, surface)` (demo mode adds the demo's first)
- `SANDBOX_PROVIDER_URL` (http://127.0.0.1:8090): where the demo's fault proxy sends faults
- `HOLDLINE_TOOL_MODULES`, `HOLDLINE_TOOLS_FILE`: your tools (`ToolSettings`)
- `HOLDLINE_LANGUAGE` (`en`): the default language of turns
- `HOLDLINE_TOKEN_TTL_S` (86400): a session token is refused (401) this long after the
  session was opened (`session.opened`'s `occurred_at` is the issue time); 0 = never
- `HOLDLINE_RATE_SESSION` `burst/per_second` (`30/5`) and `HOLDLINE_RATE_TENANT`
  (`1000/100`): token buckets for session writes (turns, activity, handoff) per session
  and per tenant, agent WebSocket frames and connects included; beyond them 429
  problem+json with `Retry-After` (an `error` frame on the socket); `0` disables one
- `HOLDLINE_RATE_OPEN_TENANT` (`1000/100`) and `HOLDLINE_RATE_OPEN_ADDRESS` (`60/6`): session
  openings per tenant and per client address (loopback exempt)
- `HOLDLINE_ERASURE_SWEEP_S` (5): how often erased sessions' settled business is purged
  and idle sessions are evicted
- `HOLDLINE_SESSION_IDLE_S` (1800): an idle, settled session leaves the surface's memory
  and is read back from the streams on demand; 0 = never
- `HOLDLINE_MODEL_MODULES` `module,...` (empty): imported before the model is chosen, so
  they can register models of their own (`libs.models.register`); demo mode adds the demo's
- `HOLDLINE_MODEL` and its adapters' `OPENAI_*`, `HOLDLINE_MODEL_*`: `ModelSettings.from_env`
- `HOLDLINE_TURN_PHASES` (off; any value but `0` turns it on): time each phase of a turn
  into `holdline_turn_phase_seconds`
- the voice channel's: `VoiceSettings.from_env` (voice/settings.py); a phone edge that
  cannot work raises `TelephonyMisconfigured` here, before anything starts
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass, field
from typing import Literal

from libs.config import (
    BusSettings,
    ModelSettings,
    ServeSettings,
    ToolSettings,
    env_bool,
    env_float,
    env_int,
    env_str,
)
from libs.modes import model_modules, surface_routes

from .voice.settings import VoiceSettings

log = logging.getLogger(__name__)


class Misconfigured(ValueError):
    """The surface's settings cannot be used safely (it refuses to start)."""


def is_loopback_host(host: str) -> bool:
    """Whether a listening address is reachable only from this machine."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class OpenSurface:
    """A surface that would serve anyone: refused, or (`HOLDLINE_INSECURE_OPEN`) warned of."""

    message: str
    fatal: bool


def startup_refusal(
    host: str, *, api_keys: bool, jwt_configured: bool, insecure_open: bool
) -> OpenSurface | None:
    """None when the surface may start quietly. Off loopback with no tenant credential
    configured, anyone who reaches it could open a session as anyone."""
    if is_loopback_host(host) or api_keys or jwt_configured:
        return None
    if insecure_open:
        return OpenSurface(
            f"HOLDLINE_INSECURE_OPEN=1: the surface listens on {host} with no tenant "
            "credential: ANYONE who reaches it can open a session as any user of any tenant",
            fatal=False,
        )
    return OpenSurface(
        f"INTERACTION_SURFACE_HOST={host} is not loopback and no tenant credential is "
        "configured: set HOLDLINE_TENANT_API_KEYS, or HOLDLINE_JWT_KEY / HOLDLINE_JWT_JWKS "
        "(with HOLDLINE_JWT_ISSUER, HOLDLINE_JWT_AUDIENCE), or HOLDLINE_INSECURE_OPEN=1 to "
        "serve anyone anyway",
        fatal=True,
    )


def parse_api_keys(text: str) -> dict[str, str]:
    """`tenant:key` pairs separated by commas."""
    keys: dict[str, str] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        tenant, sep, key = item.partition(":")
        if not sep or not tenant.strip() or not key.strip():
            raise ValueError(f"HOLDLINE_TENANT_API_KEYS entry {item!r} is not tenant:key")
        keys[tenant.strip()] = key.strip()
    return keys


def parse_rate(name: str, text: str) -> tuple[float, float]:
    """`burst/per_second` (a bare `0` disables the limit: an infinite bucket)."""
    if text.strip() == "0":
        return (0.0, 0.0)
    burst, sep, rate = text.partition("/")
    try:
        parsed = (float(burst), float(rate))
    except ValueError:
        parsed = (-1.0, -1.0)
    if not sep or parsed[0] < 1 or parsed[1] <= 0:
        raise ValueError(f"{name} must be burst/per_second (e.g. 20/2) or 0, got {text!r}")
    return parsed


def _rate(name: str, default: str) -> tuple[float, float]:
    return parse_rate(name, env_str(name, default))


@dataclass(frozen=True, slots=True)
class JwtSettings:
    """How tenant-signed JWTs are checked; unset `key` and `jwks`: JWTs are not accepted."""

    # HOLDLINE_JWT_ISSUER: the `iss` a token must carry (empty: not checked).
    issuer: str = ""
    # HOLDLINE_JWT_AUDIENCE: the `aud` a token must carry (empty: not checked).
    audience: str = ""
    # HOLDLINE_JWT_KEY: a PEM public key, or an HMAC secret (with an HS* algorithm).
    key: str = ""
    # HOLDLINE_JWT_JWKS: a JWKS JSON document, inline or a file path (no network fetch).
    jwks: str = ""
    # HOLDLINE_JWT_ALGORITHMS: the signature algorithms accepted.
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    # HOLDLINE_JWT_TENANT_CLAIM: the claim that names the tenant.
    tenant_claim: str = "tenant"

    @classmethod
    def from_env(cls) -> JwtSettings:
        """Read the `HOLDLINE_JWT_*` settings."""
        algorithms = env_str("HOLDLINE_JWT_ALGORITHMS", "RS256,ES256")
        return cls(
            issuer=env_str("HOLDLINE_JWT_ISSUER", ""),
            audience=env_str("HOLDLINE_JWT_AUDIENCE", ""),
            key=env_str("HOLDLINE_JWT_KEY", ""),
            jwks=env_str("HOLDLINE_JWT_JWKS", ""),
            algorithms=tuple(a.strip() for a in algorithms.split(",") if a.strip()),
            tenant_claim=env_str("HOLDLINE_JWT_TENANT_CLAIM", "tenant"),
        )

    @property
    def configured(self) -> bool:
        """Whether JWTs are accepted at all."""
        return bool(self.key or self.jwks)


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the surface reads from its environment."""

    bus: BusSettings
    serve: ServeSettings
    # `tenant:key,...`: a tenant's key in `X-Api-Key` opens its sessions (the key decides the
    # tenant); when set, even a local request needs one.
    tenant_api_keys: dict[str, str] = field(default_factory=dict)
    # The tenant of a session created without one.
    default_tenant: str = "default"
    # The agent of a session created without one.
    default_agent: str = "concierge"
    # `carried` or `fresh`: what the new agent's model sees after a handoff.
    handoff_context: Literal["fresh", "carried"] = "carried"
    # Largest request body accepted (413 beyond).
    max_body_bytes: int = 16 * 1024
    # Longest turn text accepted.
    max_text_chars: int = 2000
    # A model slower than this is a failed turn, answered honestly.
    model_timeout_s: float = 8.0
    # An open turn older than this was abandoned by a crash, and so was a `client_turn_id` or
    # `tool_call_id` claim still pending after it (a repeat takes it).
    turn_timeout_s: float = 30.0
    # How long a turn waits for the session's previous turn.
    turn_wait_s: float = 10.0
    # `module:function,...`: extra routes, each installed as `function(router, surface)`; demo
    # mode adds the demo's (`libs.modes.surface_routes`).
    routes: tuple[str, ...] = ()
    provider_url: str = "http://127.0.0.1:8090"
    # The default language of turns.
    language: str = "en"
    # A session token is refused (401) this long after the session was opened, and the
    # session's open WebSockets are closed then (4401); 0 = never.
    token_ttl_s: float = 86400.0
    # How long a one-time WebSocket ticket (`POST /v1/sessions/{id}/ws-ticket`) stays valid.
    ws_ticket_ttl_s: float = 30.0
    # `burst/per_second`: token bucket for one session's writes (turns, activity, handoff); beyond
    # it 429 with `Retry-After`; `0` disables it.
    rate_session: tuple[float, float] = (30.0, 5.0)
    # `burst/per_second`: the same per tenant; `0` disables it.
    rate_tenant: tuple[float, float] = (1000.0, 100.0)
    # `burst/per_second`: sessions one tenant may open (`POST /v1/sessions`); beyond it 429 with
    # `Retry-After`; `0` disables it.
    rate_open_tenant: tuple[float, float] = (1000.0, 100.0)
    # `burst/per_second`: sessions one client address (the TCP peer; loopback is exempt) may
    # open, whatever the tenant; `0` disables it.
    rate_open_address: tuple[float, float] = (60.0, 6.0)
    # A session nothing happened to for this long (seconds), with nothing of it running, leaves
    # the surface's memory and is read back from the streams when next asked for
    # (core/eviction.py); checked every `HOLDLINE_ERASURE_SWEEP_S`; 0 = kept for ever.
    session_idle_s: float = 1800.0
    # How often (seconds) erased sessions are looked at again, to purge their operations,
    # batches and deliveries once settled (core/erasure.py); 0 = only at the erasure.
    erasure_sweep_s: float = 5.0
    # `module,...`: imported before the model is chosen, so they can register models of their own
    # (`libs.models.register`); demo mode adds the demo's (`libs.modes.model_modules`).
    model_modules: tuple[str, ...] = ()
    # Any value but `0` times each phase of a turn into `holdline_turn_phase_seconds`.
    turn_phases: bool = False
    # HOLDLINE_JWT_*: tenant-signed JWTs that open sessions (identity.py).
    jwt: JwtSettings = field(default_factory=JwtSettings)
    # `1`: start off loopback with no tenant credential configured anyway (anyone who reaches
    # the surface may open a session as anyone; logged loudly at start).
    insecure_open: bool = False
    model: ModelSettings = field(default_factory=ModelSettings)
    tools: ToolSettings = field(default_factory=ToolSettings)
    voice: VoiceSettings = field(default_factory=VoiceSettings)

    @classmethod
    def from_env(cls) -> Settings:
        """Read the settings."""
        context = env_str("HOLDLINE_HANDOFF_CONTEXT", "carried")
        if context not in ("fresh", "carried"):
            raise ValueError(f"HOLDLINE_HANDOFF_CONTEXT must be fresh or carried, got {context!r}")
        bus = BusSettings.from_env()
        tools = ToolSettings.from_env()
        serve = ServeSettings.from_env("INTERACTION_SURFACE", 8080, bus)
        keys = parse_api_keys(env_str("HOLDLINE_TENANT_API_KEYS", ""))
        jwt = JwtSettings.from_env()
        insecure_open = env_bool("HOLDLINE_INSECURE_OPEN", default=False)
        risk = startup_refusal(
            serve.http.host, api_keys=bool(keys), jwt_configured=jwt.configured,
            insecure_open=insecure_open,
        )
        if risk is not None and risk.fatal:
            raise Misconfigured(risk.message)
        if risk is not None:
            log.warning("%s", risk.message)
        return cls(
            bus=bus,
            serve=serve,
            tenant_api_keys=keys,
            jwt=jwt,
            insecure_open=insecure_open,
            default_tenant=env_str("HOLDLINE_DEFAULT_TENANT", "default"),
            default_agent=env_str("HOLDLINE_DEFAULT_AGENT", "concierge"),
            handoff_context="fresh" if context == "fresh" else "carried",
            max_body_bytes=env_int("HOLDLINE_MAX_BODY_BYTES", 16 * 1024),
            max_text_chars=env_int("HOLDLINE_MAX_TEXT_CHARS", 2000),
            model_timeout_s=env_float("HOLDLINE_MODEL_TIMEOUT_S", 8.0),
            turn_timeout_s=env_float("HOLDLINE_TURN_TIMEOUT_S", 30.0),
            turn_wait_s=env_float("HOLDLINE_TURN_WAIT_S", 10.0),
            routes=surface_routes(),
            provider_url=tools.provider_url,
            language=env_str("HOLDLINE_LANGUAGE", "en"),
            token_ttl_s=env_float("HOLDLINE_TOKEN_TTL_S", 86400.0),
            ws_ticket_ttl_s=env_float("HOLDLINE_WS_TICKET_TTL_S", 30.0),
            rate_session=_rate("HOLDLINE_RATE_SESSION", "30/5"),
            rate_tenant=_rate("HOLDLINE_RATE_TENANT", "1000/100"),
            rate_open_tenant=_rate("HOLDLINE_RATE_OPEN_TENANT", "1000/100"),
            rate_open_address=_rate("HOLDLINE_RATE_OPEN_ADDRESS", "60/6"),
            session_idle_s=env_float("HOLDLINE_SESSION_IDLE_S", 1800.0),
            erasure_sweep_s=env_float("HOLDLINE_ERASURE_SWEEP_S", 5.0),
            model_modules=model_modules(),
            turn_phases=env_str("HOLDLINE_TURN_PHASES", "") not in ("", "0"),
            model=ModelSettings.from_env(),
            tools=tools,
            voice=VoiceSettings.from_env(),
        )
