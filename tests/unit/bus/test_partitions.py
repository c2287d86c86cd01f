"""Partitions without a broker: the settings, the pod ordinal, one stable partition per session."""

from __future__ import annotations

import pytest

from libs.bus import Topology
from libs.bus.topology import InvalidPartition, Partition, partition_of


def test_partition_reads_its_settings_and_the_pod_ordinal() -> None:
    assert Partition.from_env({}) == Partition(0, 1)
    assert Partition.from_env({"HOLDLINE_PARTITIONS": "3", "HOLDLINE_PARTITION": "2"}) == (
        Partition(2, 3)
    )
    # A StatefulSet pod without HOLDLINE_PARTITION: the ordinal ending its name.
    found = Partition.from_env({"HOLDLINE_PARTITIONS": "3", "HOSTNAME": "batch-coordinator-1"})
    assert found == Partition(1, 3)
    # One partition whatever the host is called (a laptop named `dev-2` included).
    assert Partition.from_env({"HOSTNAME": "dev-2"}) == Partition(0, 1)
    for bad in ({"HOLDLINE_PARTITIONS": "2", "HOLDLINE_PARTITION": "2"},
                {"HOLDLINE_PARTITIONS": "0"}, {"HOLDLINE_PARTITION": "x"},
                {"HOLDLINE_PARTITIONS": "2", "HOSTNAME": "laptop"}):
        with pytest.raises(InvalidPartition):
            Partition.from_env(bad)


def test_sessions_hash_to_one_stable_partition_each() -> None:
    # FNV-1a 32 ("a" → 0xe40c292c), the hash of the broker's partition() mapping function.
    assert partition_of("a", 2**31) == 0xE40C292C % 2**31
    sessions = [f"s-{i}" for i in range(400)]
    for count in (1, 2, 3):
        parts = [Partition(k, count) for k in range(count)]
        for session in sessions:
            assert sum(p.owns(session) for p in parts) == 1
        share = [sum(p.owns(s) for s in sessions) for p in parts]
        assert min(share) > len(sessions) / count / 2, share
    topo = Topology("hl")
    assert topo.durable("batch-coordinator", "operations", Partition(0, 1)) == (
        "batch-coordinator-operations"
    )
    assert topo.durable("batch-coordinator", "operations", Partition(1, 2)) == (
        "batch-coordinator-operations-p1"
    )
