"""The broker's metrics without a broker: the sliding quantile window, Kafka's API names, and
the text exposition a scrape gets (names, labels, values), parsed as Prometheus parses it."""

from __future__ import annotations

import math
import re
import threading

import pytest
from kio.index import api_key_map, load_request_schema, schema_name_map

from sparklog import clock
from sparklog.broker.metrics import BrokerMetrics, QuantileWindow, ReplicaGauges, api_name
from sparklog.testing.metrics import Labels, parse
from tests.unit.test_clock import FixedClock


def _labels(**labels: str) -> Labels:
    return frozenset(labels.items())


def test_quantiles_are_nearest_ranks_of_the_window() -> None:
    window = QuantileWindow(size=1000)
    for value in range(1, 101):
        window.observe((float(value),), now_s=0.0)
    snapshot = window.snapshot(((0.5, "p50"), (0.99, "p99"), (0.999, "p999"), (0.0, "min")), now_s=1.0)
    assert snapshot.quantiles == {"p50": 50.0, "p99": 99.0, "p999": 100.0, "min": 1.0}
    assert (snapshot.count, snapshot.total) == (100, 5050.0)


def test_the_window_keeps_the_last_samples_and_count_and_sum_keep_everything() -> None:
    window = QuantileWindow(size=10)
    for value in range(1, 26):  # the window ends up holding 16..25
        window.observe((float(value),), now_s=float(value))
    snapshot = window.snapshot(((0.5, "p50"), (0.0, "min"), (1.0, "max")), now_s=25.0)
    assert snapshot.quantiles == {"p50": 20.0, "min": 16.0, "max": 25.0}
    assert (snapshot.count, snapshot.total) == (25, 325.0)


def test_columns_observed_together_are_summarised_apart() -> None:
    window = QuantileWindow(columns=2, size=3)
    for value in range(1, 5):  # rows (1, 10), (2, 20), (3, 30), (4, 40); the ring keeps the last 3
        window.observe((float(value), value * 10.0), now_s=0.0)
    first, second = (window.snapshot(((0.0, "min"), (1.0, "max")), 0.0, column) for column in (0, 1))
    assert (first.quantiles, first.count, first.total) == ({"min": 2.0, "max": 4.0}, 4, 10.0)
    assert (second.quantiles, second.count, second.total) == ({"min": 20.0, "max": 40.0}, 4, 100.0)


def test_old_samples_leave_the_quantiles_but_not_the_count() -> None:
    window = QuantileWindow(size=100, max_age_s=60.0)
    window.observe((5.0,), now_s=0.0)
    window.observe((7.0,), now_s=50.0)
    assert window.snapshot(((0.5, "p50"),), now_s=70.0).quantiles == {"p50": 7.0}  # 5.0 is 70 s old
    gone = window.snapshot(((0.5, "p50"),), now_s=200.0)
    assert math.isnan(gone.quantiles["p50"]) and (gone.count, gone.total) == (2, 12.0)
    with pytest.raises(ValueError, match="at least 1 sample"):
        QuantileWindow(size=0)


def test_api_names_are_kafkas_message_names() -> None:
    for key, name in api_key_map.items():
        expected = load_request_schema(key, min(schema_name_map[name])).__name__.removesuffix("Request")
        assert api_name(key) == expected, f"api key {key} ({name})"
    assert (api_name(0), api_name(1), api_name(3), api_name(2)) == ("Produce", "Fetch", "Metadata", "ListOffsets")
    assert api_name(9999) == "Unknown9999"


def test_rendering_after_known_records() -> None:
    recorded = FixedClock(10_000)
    with clock.installed(recorded):
        metrics = BrokerMetrics(lambda: ReplicaGauges(leaders=4, under_replicated=1, partitions=6))
        metrics.request_done(0, 9, queue_time_s=0.002, total_time_s=0.010, cpu_time_s=0.000040)
        metrics.request_done(0, 11, queue_time_s=0.000, total_time_s=0.030, cpu_time_s=0.000020)
        metrics.request_done(3, 12, queue_time_s=0.000, total_time_s=0.001, cpu_time_s=0.000100)
        metrics.bytes_in("a", wire_bytes=700, records=10)
        metrics.bytes_in("b", wire_bytes=300, records=5)
        metrics.bytes_in("a", wire_bytes=70, records=1)
        metrics.bytes_out("a", wire_bytes=900)
        metrics.commit_round("a", latency_s=0.004, records=11, wire_bytes=770, commit_s=0.003)
        scraped = parse(metrics.render().decode())
    samples = {name: series for name, series in scraped.samples.items() if not name.startswith("process_")}
    produce, metadata = _labels(request="Produce"), _labels(request="Metadata")

    def quantiles(label: str, value: str, points: dict[str, float]) -> dict[Labels, float]:
        return {_labels(**{label: value}, quantile=q): v for q, v in points.items()}

    def round_summary(name: str, value: float) -> dict[str, dict[Labels, float]]:
        """A summary of topic a after one observation of ``value``."""
        return {
            name: quantiles("topic", "a", {"0.5": value, "0.99": value}),
            f"{name}_count": {_labels(topic="a"): 1.0},
            f"{name}_sum": {_labels(topic="a"): value},
        }

    kafka_q = ("0.50", "0.75", "0.95", "0.99", "0.999")
    expected = {
        "kafka_network_requestmetrics_requests_total": {
            _labels(request="Produce", version="9"): 1.0,
            _labels(request="Produce", version="11"): 1.0,
            _labels(request="Metadata", version="12"): 1.0,
        },
        "kafka_network_requestmetrics_totaltimems": {
            **quantiles("request", "Produce", {"0.50": 10.0} | {q: 30.0 for q in kafka_q[1:]}),
            **quantiles("request", "Metadata", dict.fromkeys(kafka_q, 1.0)),
        },
        "kafka_network_requestmetrics_totaltimems_count": {produce: 2.0, metadata: 1.0},
        "kafka_network_requestmetrics_totaltimems_sum": {produce: 40.0, metadata: 1.0},
        "kafka_network_requestmetrics_requestqueuetimems": {
            **quantiles("request", "Produce", {"0.50": 0.0} | {q: 2.0 for q in kafka_q[1:]}),
            **quantiles("request", "Metadata", dict.fromkeys(kafka_q, 0.0)),
        },
        "kafka_network_requestmetrics_requestqueuetimems_count": {produce: 2.0, metadata: 1.0},
        "kafka_network_requestmetrics_requestqueuetimems_sum": {produce: 2.0, metadata: 0.0},
        "sparklog_request_cpu_seconds": {
            **quantiles("request", "Produce", {"0.5": 0.000020, "0.99": 0.000040}),
            **quantiles("request", "Metadata", {"0.5": 0.000100, "0.99": 0.000100}),
        },
        "sparklog_request_cpu_seconds_count": {produce: 2.0, metadata: 1.0},
        "sparklog_request_cpu_seconds_sum": {produce: 0.000060, metadata: 0.000100},
        "kafka_server_brokertopicmetrics_bytesin_total": {
            _labels(topic="a"): 770.0,
            _labels(topic="b"): 300.0,
            _labels(): 1070.0,
        },
        "kafka_server_brokertopicmetrics_messagesin_total": {
            _labels(topic="a"): 11.0,
            _labels(topic="b"): 5.0,
            _labels(): 16.0,
        },
        "kafka_server_brokertopicmetrics_bytesout_total": {
            _labels(topic="a"): 900.0,
            _labels(topic="b"): 0.0,
            _labels(): 900.0,
        },
        # one round of topic a: 0.004 s, 11 records, 770 bytes, appended in 0.003 s
        **round_summary("sparklog_commit_round_seconds", 0.004),
        **round_summary("sparklog_commit_round_records", 11.0),
        **round_summary("sparklog_commit_round_bytes", 770.0),
        **round_summary("sparklog_commit_round_append_seconds", 0.003),
        "kafka_server_replicamanager_underreplicatedpartitions": {_labels(): 1.0},
        "kafka_server_replicamanager_leadercount": {_labels(): 4.0},
        "kafka_server_replicamanager_partitioncount": {_labels(): 6.0},
    }
    assert {n: {k: pytest.approx(v) for k, v in s.items()} for n, s in expected.items()} == samples
    types = [line for line in scraped.text.splitlines() if line.startswith("# TYPE ")]
    for line in (
        "# TYPE kafka_network_requestmetrics_requests_total counter",
        "# TYPE kafka_network_requestmetrics_totaltimems summary",
        "# TYPE sparklog_request_cpu_seconds summary",
        "# TYPE kafka_server_brokertopicmetrics_bytesin_total counter",
        "# TYPE kafka_server_replicamanager_underreplicatedpartitions gauge",
    ):
        assert line in types, f"{line!r} not among {types}"
    assert scraped.value("process_cpu_seconds_total") >= 0  # prometheus_client's process collector


def test_quantiles_age_out_at_scrape_time() -> None:
    recorded = FixedClock(0)
    with clock.installed(recorded):
        metrics = BrokerMetrics()
        metrics.request_done(0, 9, 0.0, 0.005, 0.0001)
        recorded.ms = 120_000  # two minutes later: the window is empty, the count is not
        scraped = parse(metrics.render().decode())
    assert math.isnan(scraped.value("kafka_network_requestmetrics_totaltimems", request="Produce", quantile="0.50"))
    assert scraped.value("kafka_network_requestmetrics_totaltimems_count", request="Produce") == 1


def test_a_failing_gauge_leaves_only_its_series_out() -> None:
    def unreachable() -> ReplicaGauges:
        raise ConnectionError("ZooKeeper unreachable")

    metrics = BrokerMetrics(unreachable)
    metrics.bytes_in("t", 10, 1)
    scraped = parse(metrics.render().decode())
    assert scraped.get("kafka_server_replicamanager_underreplicatedpartitions") is None
    assert scraped.value("kafka_server_brokertopicmetrics_messagesin_total", topic="t") == 1
    with pytest.raises(AssertionError, match="no sample named kafka_server_replicamanager_leadercount"):
        scraped.value("kafka_server_replicamanager_leadercount")
    with pytest.raises(AssertionError, match=re.escape("has labels [{}, {'topic': 't'}]")):
        scraped.value("kafka_server_brokertopicmetrics_messagesin_total", topic="u")


def test_brokers_in_one_process_do_not_share_series() -> None:
    first, second = BrokerMetrics(), BrokerMetrics()
    first.bytes_in("t", 10, 1)
    assert parse(first.render().decode()).value("kafka_server_brokertopicmetrics_messagesin_total") == 1
    assert parse(second.render().decode()).value("kafka_server_brokertopicmetrics_messagesin_total") == 0


def test_concurrent_recording_loses_nothing() -> None:
    metrics = BrokerMetrics()

    def record() -> None:
        for _ in range(2_000):
            metrics.request_done(1, 17, 0.0, 0.001, 0.00001)
            metrics.bytes_out("t", 3)

    threads = [threading.Thread(target=record) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    scraped = parse(metrics.render().decode())
    assert scraped.value("kafka_network_requestmetrics_requests_total", request="Fetch", version="17") == 8_000
    assert scraped.value("kafka_server_brokertopicmetrics_bytesout_total", topic="t") == 24_000
