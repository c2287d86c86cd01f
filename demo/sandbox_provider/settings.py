"""Sandbox provider settings, read once from the environment into a frozen object.

Environment variables (an empty value counts as unset):

``SANDBOX_PROVIDER_HOST`` (default ``127.0.0.1``)
    Interface to listen on.
``SANDBOX_PROVIDER_PORT`` (default ``8090``)
    TCP port to listen on.
``SANDBOX_PROVIDER_DB`` (default ``.data/sandbox_provider.sqlite3``)
    SQLite file holding records, idempotency keys with their stored responses, the effect
    ledger and the callback outbox. Parent directories are created on start.
``HOLDLINE_CALLBACK_URL`` (default ``http://127.0.0.1:8091/v1/callbacks/sandbox``)
    Where async completions are POSTed. Set it to ``off`` to disable callbacks.
``HOLDLINE_CALLBACK_SECRET`` (default: random, per process)
    HMAC-SHA256 key used to sign callbacks (see ``libs.signing``); ``holdline run`` shares one
    random key with the worker; unset otherwise, no worker accepts the callbacks.
``SANDBOX_ASYNC_DELAY_MS`` (default ``500``)
    Time from a 202 answer to the async commit and its callback.
``SANDBOX_HANG_AFTER_COMMIT_S`` (default ``30``)
    How long a ``timeout_after_commit`` request hangs after committing before it answers.
``SANDBOX_TRANSFERS_IGNORE_IDEMPOTENCY`` (default ``0``)
    ``1``/``true``: transfers ignore ``Idempotency-Key``; every send is a new effect.
``SANDBOX_CALLBACK_MAX_ATTEMPTS`` (default ``6``)
    Delivery attempts per callback before it is given up (and logged).
``SANDBOX_CALLBACK_BACKOFF_MS`` (default ``250``)
    First retry delay of a failed callback; doubles per attempt, capped at 10 s.
``SANDBOX_CALLBACK_TIMEOUT_S`` (default ``5``)
    Per-attempt HTTP timeout of a callback.
``SANDBOX_SHUTDOWN_GRACE_S`` (default ``5``)
    How long a stopping server waits for in-flight (possibly hanging) requests.
``LOG_LEVEL`` (default ``INFO``)
    Level of the process's log (``python -m demo.sandbox_provider``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from libs import callback_secret as callback_key

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_CALLBACKS_OFF = {"off", "none", "disabled"}


def _raw(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int) -> int:
    raw = _raw(env, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from exc
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _float(env: Mapping[str, str], name: str, default: float, *, minimum: float) -> float:
    raw = _raw(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be a number, got {raw!r}") from exc
    if not value >= minimum:  # also rejects NaN
        raise ValueError(f"{name} must be >= {minimum}, got {raw!r}")
    return value


def _bool(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    raw = _raw(env, name)
    if raw is None:
        return default
    lowered = raw.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


_DEFAULT_HOST = "127.0.0.1"
_DEFAULT_PORT = 8090
_DEFAULT_DB = ".data/sandbox_provider.sqlite3"
_DEFAULT_CALLBACK_URL = "http://127.0.0.1:8091/v1/callbacks/sandbox"


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the provider reads from its environment."""

    # Interface to listen on.
    host: str = _DEFAULT_HOST
    # TCP port to listen on.
    port: int = _DEFAULT_PORT
    # SQLite file holding records, idempotency keys with their stored responses, the effect ledger
    # and the callback outbox.
    db_path: Path = Path(_DEFAULT_DB)
    # Where asynchronous completions are POSTed; `off` (None) disables callbacks (records
    # still commit and can be polled).
    callback_url: str | None = _DEFAULT_CALLBACK_URL
    # HMAC-SHA256 key that signs callbacks (`libs.signing`); unset: a random one per process
    # (no shared public default), which `holdline run` replaces with one per run.
    callback_secret: bytes = b""
    # Time from a 202 answer to the asynchronous commit and its callback (set in ms).
    async_delay_s: float = 0.5
    # How long a `timeout_after_commit` request hangs after committing before it answers.
    hang_after_commit_s: float = 30.0
    # Transfers ignore `Idempotency-Key`: every send is a new effect.
    transfers_ignore_idempotency: bool = False
    # Delivery attempts per callback before it is given up (and logged).
    callback_max_attempts: int = 6
    # First retry delay of a failed callback (set in ms); doubles per attempt, capped at 10 s.
    callback_backoff_s: float = 0.25
    # Per-attempt HTTP timeout of a callback.
    callback_timeout_s: float = 5.0
    # How long a stopping server waits for in-flight (possibly hanging) requests.
    shutdown_grace_s: float = 5.0
    # Level of the process's log.
    log_level: str = "INFO"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Build settings from ``env`` (the process environment by default)."""
        source: Mapping[str, str] = os.environ if env is None else env
        port = _int(source, "SANDBOX_PROVIDER_PORT", _DEFAULT_PORT, minimum=0)
        if port > 65535:
            raise ValueError(f"SANDBOX_PROVIDER_PORT must be <= 65535, got {port}")
        callback_url = _raw(source, "HOLDLINE_CALLBACK_URL")
        if callback_url is None:
            callback_url = _DEFAULT_CALLBACK_URL
        elif callback_url.lower() in _CALLBACKS_OFF:
            callback_url = None
        elif not callback_url.startswith(("http://", "https://")):
            raise ValueError(f"HOLDLINE_CALLBACK_URL must be an http(s) URL, got {callback_url!r}")
        secret = _raw(source, callback_key.ENV) or callback_key.generate()
        return cls(
            host=_raw(source, "SANDBOX_PROVIDER_HOST") or _DEFAULT_HOST,
            port=port,
            db_path=Path(_raw(source, "SANDBOX_PROVIDER_DB") or _DEFAULT_DB),
            callback_url=callback_url,
            callback_secret=secret.encode(),
            async_delay_s=_int(source, "SANDBOX_ASYNC_DELAY_MS", 500, minimum=0) / 1000.0,
            hang_after_commit_s=_float(source, "SANDBOX_HANG_AFTER_COMMIT_S", 30.0, minimum=0.0),
            transfers_ignore_idempotency=_bool(
                source, "SANDBOX_TRANSFERS_IGNORE_IDEMPOTENCY", default=False
            ),
            callback_max_attempts=_int(source, "SANDBOX_CALLBACK_MAX_ATTEMPTS", 6, minimum=1),
            callback_backoff_s=_int(source, "SANDBOX_CALLBACK_BACKOFF_MS", 250, minimum=0) / 1000.0,
            callback_timeout_s=_float(source, "SANDBOX_CALLBACK_TIMEOUT_S", 5.0, minimum=0.1),
            shutdown_grace_s=_float(source, "SANDBOX_SHUTDOWN_GRACE_S", 5.0, minimum=0.0),
            log_level=_raw(source, "LOG_LEVEL") or "INFO",
        )
