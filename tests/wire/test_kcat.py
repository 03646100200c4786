"""Debian's kcat (librdkafka 2.0, installed by the Makefile) against a real broker agent:
metadata listing, keyed produce with headers in every codec, and consume from the beginning."""

from __future__ import annotations

import subprocess

import pytest

import sparklog
from sparklog.testing import BrokerAgents
from tests.wire.conftest import create_led_topic

TOPIC = "wire-kcat"


def kcat(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"kcat {' '.join(args)} failed: {done.stderr}"
    return done.stdout


def test_kcat_lists_the_brokers_and_topics(cluster: sparklog.Cluster, one_broker: BrokerAgents) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=3)
    listing = kcat("-b", one_broker.bootstrap_servers, "-L")
    assert f"broker 1 at 127.0.0.1:{one_broker.port(1)}" in listing
    assert f'topic "{TOPIC}" with 3 partitions' in listing


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produces_and_consumes(cluster: sparklog.Cluster, one_broker: BrokerAgents, codec: str) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=3)
    lines = [f"key{i % 4}:value {i}" for i in range(50)]
    brokers = ["-b", one_broker.bootstrap_servers]
    producing = ["-P", "-t", TOPIC, "-K:", "-z", codec, "-H", "origin=kcat", "-X", "partitioner=murmur2_random"]
    kcat(*brokers, *producing, stdin="\n".join(lines) + "\n")
    out = kcat(*brokers, "-C", "-t", TOPIC, "-o", "beginning", "-e", "-q", "-f", "%p|%o|%k|%s|%h\n")
    consumed = [line.split("|") for line in out.splitlines()]
    assert sorted(f"{k}:{v}" for _p, _o, k, v, _h in consumed) == sorted(lines)
    assert {h for *_rest, h in consumed} == {"origin=kcat"}
    table = cluster.read(TOPIC)
    stored = {(r["partition"], r["offset"]): (r["key"], r["value"]) for r in table.to_pylist()}
    assert stored == {(int(p), int(o)): (k.encode(), v.encode()) for p, o, k, v, _h in consumed}
    # per key, one partition (murmur2) and offsets in send order
    for key in {f"key{i}" for i in range(4)}:
        rows = [(int(p), int(o), v) for p, o, k, v, _h in consumed if k == key]
        assert len({p for p, _o, _v in rows}) == 1
        assert [v for _p, _o, v in sorted(rows)] == [line.split(":", 1)[1] for line in lines if line.startswith(key)]
