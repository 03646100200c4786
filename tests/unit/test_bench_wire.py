"""The Kafka-wire benchmarks' own logic, without brokers: the rotation of systems, the table's
Kafka and mock columns, Kafka's configuration and jar check, and the raw protocol framing."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks import kafka_broker
from benchmarks.case_wire_cpu import _check_answer, produce_body, record_batch, request_cpu_figures
from benchmarks.harness import CaseResult, Metric, Target, format_table, rotate
from benchmarks.wire import kafka_request, read_frame, wire_metric
from sparklog.broker.metrics import BrokerMetrics
from sparklog.testing.metrics import parse


def test_rotate_changes_who_goes_first() -> None:
    ran: list[str] = []

    def side(name: str) -> Callable[[], str]:
        def run() -> str:
            ran.append(name)
            return name.upper()

        return run

    sides = {name: side(name) for name in ("sparklog", "kafka", "mock")}
    assert rotate(1, sides) == (
        ["sparklog", "kafka", "mock"],
        {"sparklog": "SPARKLOG", "kafka": "KAFKA", "mock": "MOCK"},
    )
    assert rotate(2, sides)[0] == ["kafka", "mock", "sparklog"]
    assert rotate(3, sides)[0] == ["mock", "sparklog", "kafka"]
    assert rotate(4, sides)[0] == ["sparklog", "kafka", "mock"]
    assert ran[3:6] == ["kafka", "mock", "sparklog"]


def test_wire_metric_kafka_is_the_baseline_and_the_mock_a_column() -> None:
    rows: list[dict[str, Any]] = [
        {"sparklog": {"x": 10.0}, "kafka": {"x": 40.0}, "mock": {"x": 100.0}},
        {"sparklog": {"x": 30.0}, "kafka": {"x": 60.0}, "mock": {"x": None}},
    ]
    metric = wire_metric("m", rows, "x", "rate", "records/s", [Target("ratio", ">=", 0.8, "≥ 0.8× Kafka")])
    assert metric.sparklog_median == 20.0 and metric.baseline_median == 50.0
    assert metric.ratio == pytest.approx(0.4) and metric.other_ratio("mock") == pytest.approx(0.2)
    assert metric.status == "miss"
    table = format_table([CaseResult("m", "t", "", metrics=[metric])])
    assert "ratio/mock" in table and "50 (kafka)" in table and "0.40×" in table and "0.20×" in table
    assert metric.to_json()["ratio_to_others"] == {"mock": pytest.approx(0.2)}


def test_wire_metric_without_kafka_or_mock() -> None:
    metric = wire_metric("u", [{"sparklog": {"x": 1.0}}], "x", "cpu", "µs")
    assert metric.baseline is None and metric.others == {} and math.isnan(metric.ratio)
    assert "ratio/mock" not in format_table([CaseResult("u", "t", "", metrics=[metric])])
    assert Metric("a", "b", "s", [1.0]).to_json()["others_runs"] == {}


def test_kafka_server_properties(tmp_path: Path) -> None:
    props = kafka_broker.server_properties(tmp_path, 9001, 9002, {"group.initial.rebalance.delay.ms": "0"})
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9002"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9001,CONTROLLER://127.0.0.1:9002"
    assert props["offsets.topic.replication.factor"] == props["transaction.state.log.min.isr"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert "log.flush.interval.messages" not in props  # Kafka's default durability
    assert len(kafka_broker.cluster_id()) == 22


def test_missing_kafka_jars_name_the_make_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kafka_broker.JARS_ENV, str(tmp_path))
    with pytest.raises(kafka_broker.KafkaJarsMissing, match="make kafka-jars"):
        kafka_broker.kafka_jars()
    (tmp_path / "kafka_2.13-4.4.0.jar").write_bytes(b"")
    assert kafka_broker.kafka_jars() == tmp_path and kafka_broker.kafka_version(tmp_path) == "4.4.0"


class _Stream:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, n: int) -> bytes:
        chunk, self.data = self.data[:n], self.data[n:]
        return chunk


def test_raw_produce_request_framing() -> None:
    batch = record_batch(3, seed=1)
    request = kafka_request(0, 3, 7, produce_body("t", 2, batch))
    frame = read_frame(_Stream(request))
    api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
    assert (api_key, version, correlation_id) == (0, 3, 7) and frame.endswith(batch)
    # a Produce v3 answer: correlation id, one topic "t", one partition 2, error 0, offsets, throttle
    answer = struct.pack(">ii", 7, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">iihqq", 1, 2, 0, 0, -1) + bytes(4)
    _check_answer(answer, 7)
    with pytest.raises(AssertionError):
        _check_answer(answer, 8)


def test_request_cpu_is_read_from_the_metrics_between_two_scrapes() -> None:
    metrics = BrokerMetrics()
    for _ in range(10):
        metrics.request_done(0, 9, 0.0, 0.002, 0.000100)  # warm-up: before the first scrape
    before = parse(metrics.render().decode())
    for cpu_s in (0.000020, 0.000030, 0.000040, 0.000050):
        metrics.request_done(0, 9, 0.0, 0.001, cpu_s)
    metrics.request_done(3, 12, 0.0, 0.001, 0.5)  # other APIs are not Produce's
    figures = request_cpu_figures(before, parse(metrics.render().decode()), records=1)
    assert figures["request_cpu_us_1"] == pytest.approx(35.0)
    # p50 / p99 over the window, which still holds the warm-up's samples
    assert (figures["request_cpu_p50_us_1"], figures["request_cpu_p99_us_1"]) == (pytest.approx(100.0),) * 2
