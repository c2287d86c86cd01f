"""The broker users derived from the declarations (libs/broker_access.py), without a broker
(tests/system/hostile/test_broker_access.py starts a nats-server on the same configuration)."""

from __future__ import annotations

import sys
from pathlib import Path

from libs.broker_access import (
    OPERATOR,
    SERVICE_PACKAGES,
    cluster_access,
    declared_users,
    inbox_for,
    new_passwords,
    server_config,
)
from libs.bus import Context, Topology
from libs.supervisor import SERVICES, Supervisor

PUBLISHES = {
    "interaction-surface": {
        Context.INTERACTION, Context.CONTROL, Context.OPERATIONS, Context.BATCHES,
        Context.DELIVERIES,
    },
    "operation-worker": {Context.OPERATIONS, Context.DLQ},
    "batch-coordinator": {Context.BATCHES, Context.DELIVERIES, Context.OPERATIONS},
    "delivery-policy": {Context.DELIVERIES},
    OPERATOR: {Context.WORK, Context.OPERATIONS},
}


def test_each_user_appends_only_to_the_streams_it_declares() -> None:
    topology = Topology("p1")
    users = {u.user: u for u in declared_users(topology)}
    assert set(users) == set(PUBLISHES)
    for name, contexts in PUBLISHES.items():
        streams = {s for s in users[name].publish if s.startswith("p1.")}
        assert streams == {topology.context_filter(c) for c in contexts}, name
        # Nothing broader than the JetStream API, KV and its own acks and inbox.
        assert ">" not in users[name].publish
        assert not [s for s in users[name].publish if s.startswith("_INBOX.")]


def test_each_user_subscribes_to_its_own_inbox_only() -> None:
    for user in declared_users():
        assert user.subscribe == (f"{inbox_for(user.user)}.>",)
        assert user.inbox_prefix == inbox_for(user.user)


def test_every_service_on_the_broker_has_a_user() -> None:
    on_broker = {p for p, _prefix, _port in SERVICES} - {"sandbox_provider"}
    assert set(SERVICE_PACKAGES) == on_broker


def test_the_server_configuration_names_every_user_with_its_password() -> None:
    users = declared_users()
    passwords = new_passwords(users)
    assert len(set(passwords.values())) == len(users)
    text = server_config(users, passwords)
    assert text.startswith("authorization {")
    for user in users:
        assert f'user: "{user.user}"' in text
        assert f'password: "{passwords[user.user]}"' in text
    assert '"$JS.API.>"' in text, "subjects with $ are quoted"


def test_the_cluster_run_gives_each_service_its_user(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path, {"PATH": str(Path(sys.executable).parent)}, cluster=3)
    supervisor.plan()
    config = (tmp_path / ".data" / "nats-cluster" / "node.conf").read_text()
    assert "authorization {" in config
    assert "tls {" in config, "the nodes require TLS on their client port"
    assert (tmp_path / ".data" / "nats-cluster" / "server-key.pem").stat().st_mode & 0o077 == 0
    assert (tmp_path / ".data" / "nats-cluster" / "node.conf").stat().st_mode & 0o077 == 0
    for child in supervisor.children:
        if child.name == "sandbox-provider":
            assert "NATS_USER" not in child.env, "the system of record has no broker user"
            continue
        user = child.env["NATS_USER"]
        assert child.name.startswith(user)
        assert f'password: "{child.env["NATS_PASSWORD"]}"' in config
        assert child.env["HOLDLINE_NATS_INBOX_PREFIX"] == inbox_for(user)
        assert child.env["NATS_TLS_CA"] == str(tmp_path / ".data" / "nats-cluster" / "ca.pem")
    operator = (tmp_path / ".data" / "nats-cluster" / "operator.env").read_text()
    assert f"NATS_USER={OPERATOR}\n" in operator
    _auth, env = cluster_access(tmp_path)
    assert set(env) == set(SERVICE_PACKAGES)
