"""NATS_URL may name several seed servers."""

from __future__ import annotations

import pytest

from libs.config import BusSettings, nats_servers


def test_nats_url_takes_several_seeds() -> None:
    assert nats_servers("nats://a:4222") == ["nats://a:4222"]
    assert nats_servers(" nats://a:4222, nats://b:4223 ,tls://c:4224,") == [
        "nats://a:4222", "nats://b:4223", "tls://c:4224",
    ]
    assert nats_servers("a:1,b:2") == ["nats://a:1", "nats://b:2"]
    assert BusSettings(nats_url="nats://a:1,nats://b:2").servers == ["nats://a:1", "nats://b:2"]
    for bad in ("", " , ", "http://a:1", "nats://a:1,ftp://b:2"):
        with pytest.raises(ValueError, match="NATS_URL"):
            nats_servers(bad)
    with pytest.raises(ValueError, match="HOLDLINE_STREAM_REPLICAS"):
        BusSettings(replicas=0)
