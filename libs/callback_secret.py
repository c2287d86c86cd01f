"""The key that signs sandbox callbacks when `HOLDLINE_CALLBACK_SECRET` is unset.

There is no shared default key: a published one would let anyone forge a callback that marks
an operation committed with no effect. `holdline run` generates one random key per run and
hands it to the worker and the provider alike; a service started alone on loopback gets a
random key of its own (so callbacks from another process are refused), and a worker bound to
any other interface refuses to start without the variable.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets

ENV = "HOLDLINE_CALLBACK_SECRET"

_log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """`host` (an interface to bind) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name, or 0.0.0.0's kin: assume it is reachable from outside


def generate() -> str:
    """A fresh random key (the supervisor's per-run one)."""
    return secrets.token_urlsafe(32)


def resolve(configured: bytes, host: str, *, service: str) -> bytes:
    """The key to use: `configured` when set; unset, a random one on loopback, else
    ValueError naming the variable to set."""
    if configured:
        return configured
    if not is_loopback(host):
        raise ValueError(
            f"{ENV} is not set and {service} listens on {host!r}, not loopback: set {ENV} "
            "to the key the sandbox provider signs its callbacks with"
        )
    _log.warning(
        "%s is not set: %s uses a random key of its own, so callbacks signed by another "
        "process will be refused (holdline run shares one key; set %s to share yours)",
        ENV, service, ENV,
    )
    return generate().encode()
