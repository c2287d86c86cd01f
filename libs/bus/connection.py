"""Connecting to the broker with reconnects, credentials and TLS when configured."""

from __future__ import annotations

import logging
import ssl
from typing import Any
from urllib.parse import urlsplit

from nats.aio.client import Client

from libs.config import BusSettings

from .client import BusClient
from .inbox import inbox_prefix

log = logging.getLogger(__name__)


def without_credentials(url: str) -> str:
    """The URL with any user and password removed (for logs)."""
    parts = urlsplit(url)
    if parts.password is None and parts.username is None:
        return url
    host = parts.hostname or ""
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return parts._replace(netloc=netloc).geturl()


def _tls_context(settings: BusSettings) -> ssl.SSLContext | None:
    if not (settings.nats_tls_ca or settings.nats_tls_cert):
        return None
    context = ssl.create_default_context(cafile=settings.nats_tls_ca)
    if settings.nats_tls_cert and settings.nats_tls_key:
        context.load_cert_chain(settings.nats_tls_cert, settings.nats_tls_key)
    return context


async def _on_disconnect() -> None:
    log.warning("nats disconnected; reconnecting")


async def _on_reconnect() -> None:
    log.info("nats reconnected")


async def connect(settings: BusSettings, *, name: str) -> Client:
    """Connect to any of the seeds, retrying forever in the background once connected.

    Several seeds (`NATS_URL=nats://a:4222,nats://b:4222`) are tried in a shuffled order,
    so clients spread over a cluster's nodes; the servers a node announces are added to
    the pool, so a client reconnects to any live node, not only to the seeds.

    `settings.client` picks the client (`HOLDLINE_BUS_CLIENT`): the lean one of
    `client.py`, or nats-py's own ("plain", its public API only).

    Wrong credentials or an unverifiable certificate keep it retrying (the service stays
    not ready) and log why, with the broker's address but never its credentials.
    """
    servers = settings.servers
    where = ", ".join(without_credentials(url) for url in servers)

    async def on_error(exc: Exception) -> None:
        log.warning("%s: cannot use the broker at %s: %s", name, where, exc)

    options: dict[str, Any] = {
        "servers": servers,
        "name": name,
        "connect_timeout": settings.connect_timeout_s,
        "max_reconnect_attempts": -1,
        # Short: after a node dies the next seed is tried at once, a dead one again soon.
        "reconnect_time_wait": settings.reconnect_wait_s,
        # A paused node keeps its sockets open; only missed pings tell the client to move.
        "ping_interval": settings.ping_interval_s,
        "max_outstanding_pings": settings.max_outstanding_pings,
        "error_cb": on_error,
        "disconnected_cb": _on_disconnect,
        "reconnected_cb": _on_reconnect,
        # A broker with per-service users lets each subscribe only to its own inboxes.
        "inbox_prefix": inbox_prefix(),
    }
    if settings.nats_user:
        options["user"] = settings.nats_user
        options["password"] = settings.nats_password
    if settings.nats_creds:
        options["user_credentials"] = settings.nats_creds
    tls = _tls_context(settings)
    if tls is not None:
        options["tls"] = tls
    # "lean" (the default): nats-py subclassed on its hot paths; "plain": nats-py as it is.
    client = BusClient() if settings.client == "lean" else Client()
    await client.connect(**options)
    return client
