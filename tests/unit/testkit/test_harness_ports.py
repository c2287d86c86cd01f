"""The harness's ports: never the same one twice in a process, never in the ephemeral range."""

from __future__ import annotations

import socket

from testkit import processes
from testkit.processes import free_port


def _ephemeral_range() -> range:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = (int(x) for x in f.read().split())
    return range(low, high + 1)


def test_free_ports_do_not_repeat_within_a_process() -> None:
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)


def test_free_ports_stay_out_of_the_range_client_connections_use() -> None:
    ephemeral = _ephemeral_range()
    assert not any(free_port() in ephemeral for _ in range(50))


def test_a_port_somebody_listens_on_is_skipped() -> None:
    upcoming = processes._next_port  # the port the next call would try first
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", upcoming))
        sock.listen()
        handed = free_port()
    assert handed != upcoming
