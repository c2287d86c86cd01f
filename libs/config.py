"""Configuration read from the environment, once, into frozen settings objects.

Every timing that tests need short is an environment variable here, so a test run and a
production deployment differ only in their environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from libs.modes import DEMO_MODEL, demo_mode

N = TypeVar("N", int, float)

# Lowering priority needs no privilege; raising it (a negative increment) would.
MAX_NICE = 19
# What the background services (worker, coordinator, policy) add to their nice value by
# default: measured, it cuts the acceptance tail at 50 paced sessions on 2 cores (see
# docs/journal/2026-12-03-turn-path-first.md).
BACKGROUND_NICE = 10

_PREFIX_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def env_str(name: str, default: str, environ: Mapping[str, str] | None = None) -> str:
    """A string setting; empty counts as unset. `environ`: a snapshot to read instead of the
    process environment (the supervisor plans its children from one)."""
    value = (os.environ if environ is None else environ).get(name, "")
    return value if value else default


def _env_number(
    name: str, default: N, parse: Callable[[str], N], what: str, environ: Mapping[str, str] | None
) -> N:
    raw = (os.environ if environ is None else environ).get(name, "")
    if not raw:
        return default
    try:
        return parse(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be {what}, got {raw!r}") from exc


def env_float(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    """A float setting with a readable error for a bad value."""
    return _env_number(name, default, float, "a number", environ)


def env_int(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    """An integer setting with a readable error for a bad value."""
    return _env_number(name, default, int, "an integer", environ)


def env_bool(name: str, *, default: bool) -> bool:
    """A boolean setting: 1/true/yes/on are true."""
    raw = os.environ.get(name, "")
    if not raw:
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


_SCHEMES = ("nats", "tls", "ws", "wss")


def nats_servers(value: str) -> list[str]:
    """The seed URLs of `NATS_URL`: one URL, or several separated by commas (a cluster).

    Whitespace around each seed and empty seeds (a trailing comma) are ignored; a bare
    `host:port` gets `nats://`. No seed at all, or an unknown scheme, is refused.
    """
    seeds = [part.strip() for part in value.split(",") if part.strip()]
    if not seeds:
        raise ValueError("NATS_URL names no broker")
    servers: list[str] = []
    for seed in seeds:
        url = seed if "://" in seed else f"nats://{seed}"
        scheme = url.split("://", 1)[0]
        if scheme not in _SCHEMES:
            raise ValueError(f"NATS_URL seed {seed!r}: scheme must be one of {_SCHEMES}")
        servers.append(url)
    return servers


@dataclass(frozen=True, slots=True)
class BusTimings:
    """The bus library's waits and read mode, handed down from `BusSettings.timings` by the
    runtime (consumers, event store, live views) and the callers of the free functions
    (`append`, `claim_once`, `load`, `read_subject`). The defaults are the library's own:
    a process that never read its environment behaves like one that read an empty one."""

    # How long one append (or claim) keeps trying while its stream has no leader.
    append_retry_s: float = 8.0
    # How long a consumer's handler waits out an unavailable broker before failing.
    broker_patience_s: float = 30.0
    # Silence after which a durable consumer checks that the broker still has it.
    consumer_check_s: float = 3.0
    # Idle heartbeat of the ordered consumers live views follow streams with: one on a dead
    # node is noticed after two missed heartbeats and recreated. nats-py's default (5 s) left
    # views (admission and the surface wait on them) 10 s behind after a node or broker
    # kill; 0.5 s costs two tiny messages per second and stream.
    follow_heartbeat_s: float = 0.5
    # Reads of one subject ask the stream leader's last sequence first (replicated streams).
    consistent_reads: bool = False


# The library defaults, for parameters of callers that were handed no timings.
DEFAULT_TIMINGS = BusTimings()

# The bus's client modes (`BusSettings.client`).
BUS_CLIENTS = ("lean", "plain")


@dataclass(frozen=True)
class BusSettings:
    """How a process reaches the broker and how its streams and consumers behave."""

    # NATS_URL: the broker, or several seeds separated by commas (a cluster); a bare host:port gets
    # nats://.
    nats_url: str = "nats://127.0.0.1:4222"
    # Prefix of every stream, subject and bucket: lets tests (and tenants of one broker)
    # keep their names apart.
    prefix: str = "hl"
    # Replicas of every stream (1, or 3 on a cluster).
    replicas: int = 1
    # How long the broker remembers a message id, so a republished event is dropped.
    duplicate_window_s: float = 120.0
    # Short on purpose: a handler that still works heartbeats (`in_progress`, every third
    # of this), so only a dead process's messages wait this long for another consumer.
    ack_wait_s: float = 2.0
    # Deliveries of one message before it goes to the dead-letter stream.
    max_deliver: int = 5
    # Wait before a refused (NAK) message is delivered again.
    redelivery_backoff_s: float = 1.0
    # Largest event an append accepts.
    max_event_bytes: int = 256 * 1024
    # NATS_USER / NATS_PASSWORD: user and password authentication.
    nats_user: str | None = None
    # With NATS_USER.
    nats_password: str | None = None
    # NATS_CREDS: a credentials file (JWT and NKey).
    nats_creds: str | None = None
    # NATS_TLS_CA: the CA that signed the broker's certificate.
    nats_tls_ca: str | None = None
    # NATS_TLS_CERT / NATS_TLS_KEY: this client's certificate and key (mutual TLS).
    nats_tls_cert: str | None = None
    # With NATS_TLS_CERT.
    nats_tls_key: str | None = None
    # How long one connection attempt to a seed may take.
    connect_timeout_s: float = 2.0
    # Reconnects: a killed node refuses at once and the client moves on to the next seed
    # after `reconnect_wait_s`; a paused node (sockets open, nothing answers) is noticed
    # after `ping_interval_s` x (max_outstanding_pings + 1).
    reconnect_wait_s: float = 0.25
    # Interval of the client's pings to the broker.
    ping_interval_s: float = 5.0
    # Unanswered pings after which the connection counts as lost.
    max_outstanding_pings: int = 2
    # On SIGTERM: how long in-flight messages may finish before they are handed back (NAK).
    graceful_shutdown_s: float = 10.0
    # How long one append (or claim) keeps trying while its stream has no leader.
    append_retry_s: float = 8.0
    # How long a consumer's handler waits out an unavailable broker before failing.
    broker_patience_s: float = 30.0
    # Silence after which a durable consumer checks that the broker still has it.
    consumer_check_s: float = 3.0
    # Idle heartbeat of the ordered consumers live views follow streams with (a view notices a lost
    # node after two missed beats).
    follow_heartbeat_s: float = 0.5
    # Which client the bus connects with: "lean" (nats-py subclassed on its request and
    # delivery paths, reading its private fields: libs/bus/client.py) or "plain" (nats-py's
    # public API only), for when the nats-py pin has to move before the lean path is
    # checked against the new version.
    client: str = "lean"

    def __post_init__(self) -> None:
        if self.client not in BUS_CLIENTS:
            raise ValueError(
                f"HOLDLINE_BUS_CLIENT must be one of {', '.join(BUS_CLIENTS)}, got {self.client!r}"
            )
        if not _PREFIX_RE.match(self.prefix):
            raise ValueError(
                f"HOLDLINE_PREFIX must match {_PREFIX_RE.pattern}, got {self.prefix!r}"
            )
        if self.replicas < 1:
            raise ValueError(f"HOLDLINE_STREAM_REPLICAS must be 1 or more, got {self.replicas}")
        nats_servers(self.nats_url)  # a bad seed list fails here, with its reason

    @property
    def servers(self) -> list[str]:
        """The broker seeds of `nats_url`, in the order given."""
        return nats_servers(self.nats_url)

    @property
    def timings(self) -> BusTimings:
        """What the bus library is handed: these waits, and leader-checked reads when the
        streams are replicated."""
        return BusTimings(
            append_retry_s=self.append_retry_s,
            broker_patience_s=self.broker_patience_s,
            consumer_check_s=self.consumer_check_s,
            follow_heartbeat_s=self.follow_heartbeat_s,
            consistent_reads=self.replicas > 1,
        )

    @classmethod
    def from_env(cls) -> BusSettings:
        """Read the broker settings from the environment."""
        return cls(
            nats_url=env_str("NATS_URL", cls.nats_url),
            prefix=env_str("HOLDLINE_PREFIX", cls.prefix),
            replicas=env_int("HOLDLINE_STREAM_REPLICAS", cls.replicas),
            duplicate_window_s=env_float("HOLDLINE_DUPLICATE_WINDOW_S", cls.duplicate_window_s),
            ack_wait_s=env_float("HOLDLINE_ACK_WAIT_S", cls.ack_wait_s),
            max_deliver=env_int("HOLDLINE_MAX_DELIVER", cls.max_deliver),
            redelivery_backoff_s=env_float(
                "HOLDLINE_REDELIVERY_BACKOFF_S", cls.redelivery_backoff_s
            ),
            max_event_bytes=env_int("HOLDLINE_MAX_EVENT_BYTES", cls.max_event_bytes),
            nats_user=os.environ.get("NATS_USER") or None,
            nats_password=os.environ.get("NATS_PASSWORD") or None,
            nats_creds=os.environ.get("NATS_CREDS") or None,
            nats_tls_ca=os.environ.get("NATS_TLS_CA") or None,
            nats_tls_cert=os.environ.get("NATS_TLS_CERT") or None,
            nats_tls_key=os.environ.get("NATS_TLS_KEY") or None,
            connect_timeout_s=env_float("HOLDLINE_CONNECT_TIMEOUT_S", cls.connect_timeout_s),
            reconnect_wait_s=env_float("HOLDLINE_NATS_RECONNECT_WAIT_S", cls.reconnect_wait_s),
            ping_interval_s=env_float("HOLDLINE_NATS_PING_INTERVAL_S", cls.ping_interval_s),
            max_outstanding_pings=env_int(
                "HOLDLINE_NATS_MAX_OUTSTANDING_PINGS", cls.max_outstanding_pings
            ),
            graceful_shutdown_s=env_float(
                "HOLDLINE_GRACEFUL_SHUTDOWN_S", cls.graceful_shutdown_s
            ),
            append_retry_s=env_float("HOLDLINE_APPEND_RETRY_S", cls.append_retry_s),
            broker_patience_s=env_float("HOLDLINE_BROKER_PATIENCE_S", cls.broker_patience_s),
            consumer_check_s=env_float("HOLDLINE_CONSUMER_CHECK_S", cls.consumer_check_s),
            follow_heartbeat_s=env_float("HOLDLINE_FOLLOW_HEARTBEAT_S", cls.follow_heartbeat_s),
            client=env_str("HOLDLINE_BUS_CLIENT", cls.client),
        )


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """Where a service's HTTP endpoint listens."""

    # The interface the service listens on.
    host: str
    # The TCP port the service listens on.
    port: int

    @classmethod
    def from_env(cls, service_env: str, default_port: int) -> HttpSettings:
        """Read `<SERVICE>_HOST` and `<SERVICE>_PORT`, defaulting to loopback."""
        return cls(
            host=env_str(f"{service_env}_HOST", "127.0.0.1"),
            port=env_int(f"{service_env}_PORT", default_port),
        )


@dataclass(frozen=True, slots=True)
class HeapSettings:
    """How `libs.heap.settle` sets the collector (why: that module's docstring).

    `HOLDLINE_GC_FREEZE` (default on): freeze what exists once the app is built;
    `HOLDLINE_GC_GEN0`: allocations between young collections (CPython's default, 700;
    10,000 measured too: no full collection in the span, but young ones of up to 18 ms).
    """

    # Freeze what exists once the app is built, so collections skip it.
    freeze: bool = True
    # Allocations between young collections (CPython's default).
    gen0_threshold: int = 700

    @classmethod
    def from_env(cls) -> HeapSettings:
        """Both from the environment."""
        return cls(
            freeze=env_bool("HOLDLINE_GC_FREEZE", default=True),
            gen0_threshold=env_int("HOLDLINE_GC_GEN0", 700),
        )


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """How `libs.serve` runs a service's app: where it listens, how it logs, how long a
    stopping server leaves in-flight requests."""

    http: HttpSettings = field(default_factory=lambda: HttpSettings("127.0.0.1", 8080))
    # Level of the process's log.
    log_level: str = "INFO"
    graceful_shutdown_s: float = 10.0
    heap: HeapSettings = field(default_factory=HeapSettings)
    # Added to the process's nice value at start (0-19). Background services default to 10
    # so that on a shared machine the turn path (surface, broker) gets the CPU first.
    nice: int = 0

    @classmethod
    def from_env(
        cls, service_env: str, default_port: int, bus: BusSettings, *, default_nice: int = 0
    ) -> ServeSettings:
        """`<SERVICE>_HOST`/`_PORT`/`_NICE` and `HOLDLINE_LOG_LEVEL`; the shutdown budget is
        the one the bus settings read (`HOLDLINE_GRACEFUL_SHUTDOWN_S`), so both drain alike."""
        nice = env_int(f"{service_env}_NICE", default_nice)
        if not 0 <= nice <= MAX_NICE:
            raise ValueError(f"{service_env}_NICE must be between 0 and {MAX_NICE}, got {nice}")
        return cls(
            http=HttpSettings.from_env(service_env, default_port),
            log_level=env_str("HOLDLINE_LOG_LEVEL", "INFO"),
            graceful_shutdown_s=bus.graceful_shutdown_s,
            heap=HeapSettings.from_env(),
            nice=nice,
        )


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """Which model a process uses (`libs.models.get_model`); empty strings: adapter defaults."""

    # HOLDLINE_MODEL: the conversation model by name (a built-in adapter or one registered);
    # unset: `openai` with OPENAI_API_KEY, else `mock` in demo mode, else none (`libs.modes`).
    name: str = ""
    # HOLDLINE_MODEL_MAX_RETRIES: retries of one model call, both HTTP adapters.
    max_retries: int = 2
    # The OpenAI Responses adapter (`openai`), OPENAI_*: its API key; set, it makes `openai`
    # the surface's default model.
    openai_api_key: str = ""
    # The model the `openai` adapter asks for; empty: the adapter's default.
    openai_model: str = ""
    # Base URL of the OpenAI API; empty: the adapter's default.
    openai_base_url: str = ""
    # Timeout of one call to the OpenAI API.
    openai_timeout_s: float = 20.0
    # Any OpenAI-compatible Chat Completions server (`chat-completions`), HOLDLINE_MODEL_*:
    # its base URL.
    base_url: str = ""
    # The model the `chat-completions` adapter asks for.
    model_name: str = ""
    # The `chat-completions` server's API key.
    api_key: str = ""
    # Timeout of one `chat-completions` call; a model slower than this is a failed turn.
    timeout_s: float = 8.0

    @classmethod
    def from_env(cls, *, default_name: str | None = None) -> ModelSettings:
        """Read the model settings; `default_name` replaces the OPENAI_API_KEY rule for a
        process whose model defaults otherwise (the coordinator's: the demo's or none)."""
        defaults = cls()  # with slots, class attributes are descriptors, not values
        key = env_str("OPENAI_API_KEY", "")
        if default_name is None:
            default_name = "openai" if key else (DEMO_MODEL if demo_mode() else "")
        return cls(
            name=env_str("HOLDLINE_MODEL", default_name),
            max_retries=env_int("HOLDLINE_MODEL_MAX_RETRIES", defaults.max_retries),
            openai_api_key=key,
            openai_model=env_str("OPENAI_MODEL", ""),
            openai_base_url=env_str("OPENAI_BASE_URL", ""),
            openai_timeout_s=env_float("OPENAI_TIMEOUT_S", defaults.openai_timeout_s),
            base_url=env_str("HOLDLINE_MODEL_BASE_URL", ""),
            model_name=env_str("HOLDLINE_MODEL_NAME", ""),
            api_key=env_str("HOLDLINE_MODEL_API_KEY", ""),
            timeout_s=env_float("HOLDLINE_MODEL_TIMEOUT_S", defaults.timeout_s),
        )


@dataclass(frozen=True, slots=True)
class ToolSettings:
    """Where a process's tools come from (`libs.tools.default_registry`, `libs.modes`)."""

    # HOLDLINE_TOOL_MODULES: importable modules that declare (and may execute) tools.
    modules: tuple[str, ...] = ()
    # HOLDLINE_TOOLS_FILE: HTTP tools declared in TOML; empty: none.
    tools_file: str = ""
    # SANDBOX_PROVIDER_URL: the system of record of the demo tools.
    provider_url: str = "http://127.0.0.1:8090"
    # HOLDLINE_CALLBACK_SECRET: the sandbox's callback HMAC key; unset: `libs.callback_secret`.
    callback_secret: bytes = b""
    # HOLDLINE_SANDBOX_CALLBACK_TWICE: ask the sandbox to send every callback twice (tests).
    callback_twice: bool = False
    # HOLDLINE_DEMO: demo mode, `libs.modes.demo_mode` (default: on when no tools are set).
    demo: bool = True
    # HOLDLINE_HTTP_MAX_RESPONSE_BYTES: longest answer a file's HTTP tool reads (default cap).
    http_max_response_bytes: int = 1 << 20

    @classmethod
    def from_env(cls) -> ToolSettings:
        """Read the tool settings."""
        return cls(
            modules=tuple(m.strip() for m in env_str("HOLDLINE_TOOL_MODULES", "").split(",")
                          if m.strip()),
            tools_file=env_str("HOLDLINE_TOOLS_FILE", ""),
            provider_url=env_str("SANDBOX_PROVIDER_URL", "http://127.0.0.1:8090"),
            callback_secret=env_str("HOLDLINE_CALLBACK_SECRET", "").encode(),
            callback_twice=env_bool("HOLDLINE_SANDBOX_CALLBACK_TWICE", default=False),
            demo=demo_mode(),
            http_max_response_bytes=env_int("HOLDLINE_HTTP_MAX_RESPONSE_BYTES", 1 << 20),
        )
