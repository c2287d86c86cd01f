"""Who may do what on the broker: one NATS user per service, its permissions derived from the
roles it declares (`services/<name>/consumers.py`, `libs/roles.py`).

Each user may publish only:
- the subjects of the streams it appends to (`Publication`: `<prefix>.<context>.>`);
- the JetStream API (`$JS.API.>`: declaring streams, consumers and buckets, pulling, reading)
  and the KV buckets' subjects (`$KV.>`);
- acknowledgements on the streams its durable consumers read (`$JS.ACK.<stream>.>`) and
  flow-control replies of ordered consumers (`$JS.FC.>`);
- its own inbox (`_INBOX_<user>.>`).
It may subscribe only to its own inbox: every message a service reads from a stream comes
through the JetStream API to an inbox, so no user can listen on a stream's subjects, or on
another user's inbox (where that user's deliveries and API answers arrive).

What it does not close: the JetStream API is not narrowed per stream, so a user holding a
service's password can create a consumer on any stream and read it into its own inbox (see
docs/guides/security.md: separate accounts are the next step). It cannot append to another
service's streams, or acknowledge another stream's messages.

Pure: `users` imports the declarations (data), `server_config` renders text; the supervisor
(`make run-cluster`) writes the file and gives each child its user, and
tests/system/hostile/test_broker_access.py starts a nats-server on it.
"""

from __future__ import annotations

import importlib
import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from libs.bus.topology import Topology
from libs.roles import ConsumerDeclaration, Publication

# The services that use the broker, by package (the sandbox provider, a system of record,
# does not), and the operator command (libs/operator: `holdline dlq`, `holdline resolve`).
SERVICE_PACKAGES: Final = (
    "operation_worker",
    "batch_coordinator",
    "delivery_policy",
    "interaction_surface",
)
OPERATOR: Final = "holdline-operator"


@dataclass(frozen=True, slots=True)
class UserAccess:
    """One NATS user: its name (the service's) and the subjects it may publish and
    subscribe to."""

    user: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]

    @property
    def inbox_prefix(self) -> str:
        """The inbox prefix its client must use (`HOLDLINE_NATS_INBOX_PREFIX`)."""
        return inbox_for(self.user)


def inbox_for(user: str) -> str:
    """A user's own inbox prefix."""
    return f"_INBOX_{user}"


def access(
    user: str,
    consumers: Iterable[ConsumerDeclaration],
    publications: Iterable[Publication],
    topology: Topology,
) -> UserAccess:
    """A user's permissions from the roles it declares."""
    published = dict.fromkeys(topology.context_filter(p.context) for p in publications)
    acked = dict.fromkeys(f"$JS.ACK.{topology.stream_name(c.context)}.>" for c in consumers)
    inbox = f"{inbox_for(user)}.>"
    return UserAccess(
        user=user,
        publish=(*published, "$JS.API.>", "$KV.>", *acked, "$JS.FC.>", inbox),
        subscribe=(inbox,),
    )


def declared_users(topology: Topology | None = None) -> tuple[UserAccess, ...]:
    """Every service's user and the operator's, from their declarations."""
    topology = topology or Topology()
    found: list[UserAccess] = []
    for package in SERVICE_PACKAGES:
        module = importlib.import_module(f"services.{package}.consumers")
        consumers: tuple[ConsumerDeclaration, ...] = module.CONSUMERS
        publications: tuple[Publication, ...] = module.PUBLICATIONS
        found.append(access(publications[0].service, consumers, publications, topology))
    operator = importlib.import_module("libs.operator.publications")
    found.append(access(OPERATOR, (), operator.PUBLICATIONS, topology))
    return tuple(found)


def user_of(package: str) -> str:
    """The NATS user of a service package (its service name)."""
    return package.replace("_", "-")


def new_passwords(users: Iterable[UserAccess]) -> dict[str, str]:
    """One random password per user (256 bits)."""
    return {u.user: secrets.token_urlsafe(32) for u in users}


def _list(values: Iterable[str]) -> str:
    # JSON strings are valid NATS configuration strings (`$` needs the quotes).
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def server_config(users: Iterable[UserAccess], passwords: Mapping[str, str]) -> str:
    """The `authorization` block of a nats-server configuration for these users."""
    lines = ["authorization {", "  users = ["]
    for u in users:
        lines += [
            "    {",
            f"      user: {json.dumps(u.user)}",
            f"      password: {json.dumps(passwords[u.user])}",
            "      permissions: {",
            f"        publish: {{ allow: {_list(u.publish)} }}",
            f"        subscribe: {{ allow: {_list(u.subscribe)} }}",
            "      }",
            "    }",
        ]
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def cluster_access(
    directory: Path, common: Mapping[str, str] | None = None
) -> tuple[str, dict[str, dict[str, str]]]:
    """For `make run-cluster`: the nodes' `authorization` block with fresh passwords, and each
    service package's broker settings (with `common`, e.g. the CA to verify the nodes with).
    The operator's user goes to `operator.env` (mode 0600) in `directory`, for `holdline dlq`
    and `holdline resolve` against the cluster."""
    users = declared_users()
    passwords = new_passwords(users)
    env = {
        u.user: {
            "NATS_USER": u.user,
            "NATS_PASSWORD": passwords[u.user],
            "HOLDLINE_NATS_INBOX_PREFIX": u.inbox_prefix,
            **(common or {}),
        }
        for u in users
    }
    operator = "".join(f"{k}={v}\n" for k, v in env[OPERATOR].items())
    write_private(directory / "operator.env", operator)
    by_package = {package: env[user_of(package)] for package in SERVICE_PACKAGES}
    return server_config(users, passwords), by_package


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read (it holds passwords), even one that existed."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)
