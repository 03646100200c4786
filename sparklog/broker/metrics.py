"""A broker's Prometheus metrics (DESIGN §14 "Metrics"): Kafka's names where Kafka has the
figure, sparklog's own for its commit rounds and per-request CPU.

One :class:`BrokerMetrics` per broker process, with its own ``CollectorRegistry`` (never
prometheus_client's global one), so several brokers in one process never share a series.
The components that record receive it explicitly (the listener through
:class:`~sparklog.broker.kafka.context.BrokerContext`, the appender as a constructor argument);
:meth:`BrokerMetrics.serve` publishes it over HTTP (``metrics.port``).

Names are those the Prometheus JMX exporter's usual Kafka rules (``lowercaseOutputName``)
give Kafka's MBeans, so dashboards written for Kafka read them:

* ``kafka.network:type=RequestMetrics,name=RequestsPerSec,request=<api>,version=<v>`` →
  ``kafka_network_requestmetrics_requests_total{request,version}`` (a counter per API and
  version, as Kafka's: which versions clients negotiated shows here);
* ``…name=TotalTimeMs`` / ``…name=RequestQueueTimeMs`` → summaries
  ``kafka_network_requestmetrics_totaltimems{request,quantile}`` and
  ``kafka_network_requestmetrics_requestqueuetimems`` in milliseconds, quantiles labelled as
  the exporter labels Kafka's percentiles (``0.50``, ``0.75``, ``0.95``, ``0.99``, ``0.999``),
  with ``_count`` and ``_sum``;
* ``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec|BytesOutPerSec|MessagesInPerSec``
  → ``kafka_server_brokertopicmetrics_bytesin_total`` (``…_bytesout_total``,
  ``…_messagesin_total``): one series per ``topic`` plus Kafka's all-topics series (no label);
* ``kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions|LeaderCount|PartitionCount``
  → gauges ``kafka_server_replicamanager_underreplicatedpartitions`` (``…_leadercount``,
  ``…_partitioncount``), computed when scraped.

sparklog's own, in seconds as Prometheus prefers, quantiles ``0.5`` and ``0.99``:
``sparklog_request_cpu_seconds{request}`` (the thread CPU time a request cost: reading its
frame, parsing, handling, encoding and writing the answer — what benchmark (u) reads),
``sparklog_commit_round_seconds{topic}`` (a commit round, start to acknowledgement),
``sparklog_commit_round_records{topic}``, ``sparklog_commit_round_bytes{topic}`` (wire bytes)
and ``sparklog_commit_round_append_seconds{topic}`` (the round's append to the leader's
table: files written and fsynced, the Delta commit); the counter
``sparklog_store_requests_total{kind}``: object-store requests the broker made itself by
kind (:func:`sparklog.log.object_store.store_requests`; delta-rs's own are not seen), what a
store bills (DESIGN §16). Plus prometheus_client's ``process_*``.

Invariants:

* recording is O(1), takes one lock per series (a request's three figures, a round's four,
  share one window and its lock) and no I/O; quantiles are computed only when scraped;
* counters, ``_count`` and ``_sum`` only grow (every observation ever); quantiles describe
  the last :data:`WINDOW_SAMPLES` observations no older than :data:`WINDOW_AGE_S` (a sliding
  window: Kafka's histograms decay too), NaN when there are none (Prometheus' convention);
* a failing gauge (ZooKeeper unreachable while scraped) leaves its series out of that scrape;
  the others are still served.
"""

from __future__ import annotations

import logging
import math
import threading
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.index import api_key_map
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest, start_http_server
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from sparklog import clock

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from sparklog.runtime.replica_manager import ReplicaManager

__all__ = [
    "KAFKA_QUANTILES",
    "SPARKLOG_QUANTILES",
    "WINDOW_AGE_S",
    "WINDOW_SAMPLES",
    "BrokerMetrics",
    "MetricsServer",
    "QuantileWindow",
    "ReplicaGauges",
    "api_name",
    "replica_gauges",
]

log = logging.getLogger(__name__)

WINDOW_SAMPLES = 1024  # as Kafka's (Yammer) histogram reservoir: 1028 samples
WINDOW_AGE_S = 60.0
# (quantile, label): Kafka's percentiles as the JMX exporter labels them ("50thPercentile" → 0.50).
KAFKA_QUANTILES = ((0.5, "0.50"), (0.75, "0.75"), (0.95, "0.95"), (0.99, "0.99"), (0.999, "0.999"))
SPARKLOG_QUANTILES = ((0.5, "0.5"), (0.99, "0.99"))
Quantiles = Sequence[tuple[float, str]]

# Kafka's API names ("Produce", "ListOffsets"), from kio's table of Kafka's message definitions.
_API_NAMES = {key: "".join(part.title() for part in name.split("_")) for key, name in api_key_map.items()}


def api_name(api_key: int) -> str:
    """Kafka's name of ``api_key`` (its message name without "Request"), e.g. 0 → "Produce"."""
    return _API_NAMES.get(api_key) or f"Unknown{api_key}"


@dataclass(frozen=True)
class WindowSnapshot:
    count: int
    total: float
    quantiles: dict[str, float]  # label -> value (NaN: no recent observation)


class QuantileWindow:
    """Figures observed together (``columns`` of them per observation, e.g. a request's total
    time, queue time and CPU time): every observation's count and per-figure sums, and
    quantiles over the recent ones — the last ``size`` observations no older than
    ``max_age_s`` (a ring of rows and their times, one lock for all the figures)."""

    __slots__ = ("_columns", "_lock", "_next", "_times", "count", "max_age_s", "size", "totals")

    def __init__(self, columns: int = 1, size: int = WINDOW_SAMPLES, max_age_s: float = WINDOW_AGE_S) -> None:
        if size < 1:
            raise ValueError(f"a quantile window holds at least 1 sample, not {size}")
        self.size, self.max_age_s = size, max_age_s
        self._lock = threading.Lock()
        # Grown to ``size`` as observations come, then overwritten oldest first.
        self._columns = [array("d") for _ in range(columns)]
        self._times = array("d")
        self._next = 0
        self.count = 0
        self.totals = [0.0] * columns

    def observe(self, values: Sequence[float], now_s: float) -> None:
        """One observation: a value per column."""
        with self._lock:
            self.count += 1
            totals, columns = self.totals, self._columns
            if len(self._times) < self.size:
                self._times.append(now_s)
                for i, value in enumerate(values):
                    totals[i] += value
                    columns[i].append(value)
            else:
                at = self._next
                self._times[at] = now_s
                for i, value in enumerate(values):
                    totals[i] += value
                    columns[i][at] = value
                self._next = (at + 1) % self.size

    def snapshot(self, quantiles: Quantiles, now_s: float, column: int = 0) -> WindowSnapshot:
        """Count, sum and the ``quantiles`` (nearest rank) of ``column``'s recent observations."""
        oldest = now_s - self.max_age_s
        with self._lock:
            recent = sorted(v for v, t in zip(self._columns[column], self._times, strict=True) if t >= oldest)
            count, total = self.count, self.totals[column]
        values = {label: _nearest_rank(recent, q) for q, label in quantiles}
        return WindowSnapshot(count, total, values)


def _nearest_rank(ordered: list[float], q: float) -> float:
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True)
class ReplicaGauges:
    """The partitions a broker leads (``leaders``), those of them whose ISR is smaller than
    their replica set (``under_replicated``), and the replicas it hosts (``partitions``)."""

    leaders: int
    under_replicated: int
    partitions: int


def replica_gauges(replicas: ReplicaManager, broker_id: int) -> ReplicaGauges:
    """Counted from ZooKeeper's assignments and the watched partition states (Kafka counts
    what its replica manager holds; the assignment is this broker's equivalent)."""
    leaders = under = hosted = 0
    for topic in replicas.list_topics():
        assignment, _version = replicas.metadata.assignment(topic)
        states = replicas.states(topic, [int(p) for p in assignment.partitions])
        for partition, state in states.items():
            replica_set = assignment.replicas(partition)
            hosted += broker_id in replica_set
            if state.leader == broker_id:
                leaders += 1
                under += len(set(state.isr)) < len(replica_set)
    return ReplicaGauges(leaders, under, hosted)


# The columns of a request's window (total and queue time in ms, Kafka's unit; thread CPU in s)
# and of a topic's commit-round window.
_TOTAL_MS, _QUEUE_MS, _CPU_S = 0, 1, 2
_LATENCY_S, _RECORDS, _WIRE_BYTES, _APPEND_S = 0, 1, 2, 3
_IN_BYTES, _IN_MESSAGES, _OUT_BYTES = 0, 1, 2
_ALL_TOPICS = ""


class BrokerMetrics(Collector):
    """What one broker records; see the module docstring. Thread-safe.

    ``gauges`` (optional) counts the broker's led and under-replicated partitions when scraped;
    ``store_requests`` (optional) the object-store requests of the process by kind."""

    def __init__(
        self,
        gauges: Callable[[], ReplicaGauges] | None = None,
        store_requests: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._gauges = gauges
        self._store_requests = store_requests
        self._lock = threading.Lock()  # guards the dicts below (entries are added, never removed)
        self._requests: dict[int, QuantileWindow] = {}
        self._request_versions: dict[tuple[int, int], int] = {}
        self._topics: dict[str, list[int]] = {_ALL_TOPICS: [0, 0, 0]}
        self._rounds: dict[str, QuantileWindow] = {}
        self.registry.register(self)
        ProcessCollector(registry=self.registry)

    # -- recording (called on the request and commit paths) --------------------------------
    def request_done(
        self, api_key: int, api_version: int, queue_time_s: float, total_time_s: float, cpu_time_s: float
    ) -> None:
        """One answered request of ``api_key`` at ``api_version``: how long it waited before a
        handler started it, from its frame read to its answer written, and the thread CPU time it cost."""
        window = self._requests.get(api_key)
        with self._lock:
            if window is None:
                window = self._requests.setdefault(api_key, QuantileWindow(columns=3))
            versions = self._request_versions
            versions[api_key, api_version] = versions.get((api_key, api_version), 0) + 1
        window.observe((total_time_s * 1000, queue_time_s * 1000, cpu_time_s), clock.monotonic_s())

    def bytes_in(self, topic: str, wire_bytes: int, records: int) -> None:
        """Record batches appended to ``topic`` from producers: their bytes as sent, their records."""
        self._count(topic, _IN_BYTES, wire_bytes, _IN_MESSAGES, records)

    def bytes_out(self, topic: str, wire_bytes: int) -> None:
        """Record batch bytes of ``topic`` sent to consumers."""
        self._count(topic, _OUT_BYTES, wire_bytes)

    def _count(self, topic: str, index: int, amount: int, index2: int = -1, amount2: int = 0) -> None:
        with self._lock:
            counters = self._topics.get(topic)
            if counters is None:
                counters = self._topics[topic] = [0, 0, 0]
            for row in (counters, self._topics[_ALL_TOPICS]):
                row[index] += amount
                if index2 >= 0:
                    row[index2] += amount2

    def commit_round(self, topic: str, latency_s: float, records: int, wire_bytes: int, commit_s: float) -> None:
        """One commit round of ``topic`` that appended: its latency (start to acknowledgement),
        its records and wire bytes, and the time of the append (files, fsync, Delta commit)."""
        window = self._rounds.get(topic)
        if window is None:
            with self._lock:
                window = self._rounds.setdefault(topic, QuantileWindow(columns=4))
        window.observe((latency_s, records, wire_bytes, commit_s), clock.monotonic_s())

    # -- publishing ------------------------------------------------------------------------
    def render(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of everything above."""
        return generate_latest(self.registry)

    def serve(self, host: str, port: int) -> MetricsServer:
        """Serve :meth:`render` over HTTP at ``http://host:port/metrics`` from a daemon thread
        (port 0: the OS picks one; :attr:`MetricsServer.port` says which)."""
        server, thread = start_http_server(port, host, self.registry)
        return MetricsServer(server, thread)

    # -- what a scrape sees (prometheus_client's Collector) --------------------------------
    def collect(self) -> Iterator[Metric]:
        now_s = clock.monotonic_s()
        with self._lock:
            requests = sorted((api_name(key), window) for key, window in self._requests.items())
            versions = sorted((api_name(key), version, n) for (key, version), n in self._request_versions.items())
            topics = sorted((topic, list(row)) for topic, row in self._topics.items())
            rounds = sorted(self._rounds.items(), key=lambda item: item[0])
        count = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, by API and version (Kafka's RequestsPerSec)",
            labels=["request", "version"],
        )
        for name, version, answered in versions:
            count.add_metric([name, str(version)], answered)
        yield count
        for name, doc, column, quantiles in (
            (
                "kafka_network_requestmetrics_totaltimems",
                "Milliseconds from a request's frame read to its answer written (Kafka's TotalTimeMs)",
                _TOTAL_MS,
                KAFKA_QUANTILES,
            ),
            (
                "kafka_network_requestmetrics_requestqueuetimems",
                "Milliseconds a request waited before a handler started it (Kafka's RequestQueueTimeMs)",
                _QUEUE_MS,
                KAFKA_QUANTILES,
            ),
            (
                "sparklog_request_cpu_seconds",
                "Thread CPU seconds a request cost: frame read, parse, handling, encoding, answer written",
                _CPU_S,
                SPARKLOG_QUANTILES,
            ),
        ):
            yield _summary(name, doc, "request", requests, column, quantiles, now_s)
        for index, name, doc in (
            (_IN_BYTES, "bytesin", "Record batch bytes appended from producers (Kafka's BytesInPerSec)"),
            (_OUT_BYTES, "bytesout", "Record batch bytes sent to consumers (Kafka's BytesOutPerSec)"),
            (_IN_MESSAGES, "messagesin", "Records appended from producers (Kafka's MessagesInPerSec)"),
        ):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc)
            for topic, row in topics:
                # Kafka's all-topics MBean has no topic key; the exporter renders it without a label.
                family.add_sample(family.name + "_total", {"topic": topic} if topic != _ALL_TOPICS else {}, row[index])
            yield family
        for name, doc, column in (
            ("sparklog_commit_round_seconds", "A commit round's seconds, start to acknowledgement", _LATENCY_S),
            ("sparklog_commit_round_records", "Records appended per commit round", _RECORDS),
            ("sparklog_commit_round_bytes", "Record batch bytes (as sent) appended per commit round", _WIRE_BYTES),
            (
                "sparklog_commit_round_append_seconds",
                "Seconds of a round's append to the leader's table (files written and fsynced, Delta commit)",
                _APPEND_S,
            ),
        ):
            yield _summary(name, doc, "topic", rounds, column, SPARKLOG_QUANTILES, now_s)
        if self._store_requests is not None:
            requests_by_kind = CounterMetricFamily(
                "sparklog_store_requests",
                "Object-store requests this broker made itself, by kind (delta-rs's own not included)",
                labels=["kind"],
            )
            for kind, made in sorted(self._store_requests().items()):
                requests_by_kind.add_metric([kind], made)
            yield requests_by_kind
        gauges = self._replica_gauges()
        if gauges is not None:
            for name, value, doc in (
                (
                    "underreplicatedpartitions",
                    gauges.under_replicated,
                    "Led partitions whose ISR is below the replicas",
                ),
                ("leadercount", gauges.leaders, "Partitions this broker leads"),
                ("partitioncount", gauges.partitions, "Partition replicas this broker hosts"),
            ):
                yield GaugeMetricFamily(f"kafka_server_replicamanager_{name}", doc, value=value)

    def _replica_gauges(self) -> ReplicaGauges | None:
        if self._gauges is None:
            return None
        try:
            return self._gauges()
        except Exception as exc:  # noqa: BLE001 - a scrape serves the other series (module docstring)
            log.warning("replica manager gauges left out of this scrape: %s", exc)
            return None


class MetricsServer:
    """The HTTP endpoint of a :class:`BrokerMetrics`; :meth:`close` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def _summary(
    name: str,
    doc: str,
    label: str,
    windows: Sequence[tuple[str, QuantileWindow]],
    column: int,
    quantiles: Quantiles,
    now_s: float,
) -> SummaryMetricFamily:
    """``column`` of each labelled window as one summary family."""
    family = SummaryMetricFamily(name, doc, labels=[label])
    for value, window in windows:
        snapshot = window.snapshot(quantiles, now_s, column)
        for q_label, q_value in snapshot.quantiles.items():
            family.add_sample(name, {label: value, "quantile": q_label}, q_value)
        family.add_metric([value], snapshot.count, snapshot.total)
    return family
