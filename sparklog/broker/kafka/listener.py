"""The broker agent's TCP listener for Kafka clients (``listeners``).

Per connection, one thread reads and starts requests in their order and another writes the
responses in that same order (Kafka's per-connection guarantee). A produce request that
waits for its commit does not stop the connection's next requests from being read and
queued (pipelining, up to ``_MAX_PIPELINED`` unanswered requests): a client with many
requests in flight (librdkafka pipelines without bound unless idempotent) gets them into
the leader's next group commit together, instead of one commit per request. Without it a
client sending requests faster than one per commit, or a stall (a Spark job holding the
write leases), builds a backlog that drains one commit per request, and its requests
exceed the client's ``request.timeout.ms``. A request carrying idempotent batches holds back
only the connection's later requests to the same partitions
(:class:`~sparklog.broker.kafka.context.Deferred` ``ordered``): a sequence continuing a batch
whose outcome is unknown could leave a gap; other partitions' requests (a transaction's
partitions, librdkafka sends one request per partition) share the next commit round.

Each answered request is reported to the broker's metrics
(:meth:`~sparklog.broker.metrics.BrokerMetrics.request_done`): total time from its frame read
to its answer written, queue time (its wait behind an unanswered idempotent request), and the
thread CPU time the reader and the writer spent on it (frame read, parse, start, finish,
encode, frame write; waiting costs no CPU time).

Whatever goes wrong with one connection — an oversized or truncated frame, an unknown api
key or version, an unreadable request, a handler failure — closes that connection only
(after answering the requests started before it); the agent and the other clients carry on.
"""

from __future__ import annotations

import logging
import queue
import socket
import socketserver
import threading
import time
from dataclasses import dataclass, field

from sparklog.broker.kafka.apis import PendingResponse, ProtocolError, start_request
from sparklog.broker.kafka.context import BrokerContext
from sparklog.broker.kafka.framing import FrameError, read_frame, write_frame
from sparklog.broker.metrics import BrokerMetrics
from sparklog.config import Endpoint
from sparklog.errors import ConfigError

__all__ = ["KafkaListener"]

log = logging.getLogger(__name__)

_MAX_PIPELINED = 128  # unanswered requests per connection before its reader waits


@dataclass(eq=False)
class _Answer:
    pending: PendingResponse
    written: threading.Event = field(default_factory=threading.Event)
    # For the request metrics: when its frame was read (monotonic), how long it waited to
    # start, and the reader's thread CPU time on it.
    api_key: int = -1
    received_s: float = 0.0
    queue_s: float = 0.0
    cpu_s: float = 0.0


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, listener: KafkaListener) -> None:
        self.address_family = family
        self.listener = listener
        super().__init__(address, _Connection)


class _Connection(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        self.server.listener.serve_connection(self.request, self.client_address)


class KafkaListener:
    """One listener (``NAME://host:port``) serving Kafka requests from ``cluster``."""

    def __init__(self, endpoint: Endpoint, cluster: BrokerContext, socket_request_max_bytes: int) -> None:
        self.endpoint = endpoint
        self.cluster = cluster
        self.max_bytes = socket_request_max_bytes
        host = endpoint.host or "0.0.0.0"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._server = _Server((host, endpoint.port), family, self)
        except OSError as exc:
            raise ConfigError(
                f"Cannot listen on {endpoint} (listeners): {exc.strerror}; choose a free port or another host"
            ) from exc
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port bound (the configured one, or the one the OS chose for port 0)."""
        return int(self._server.server_address[1])

    def start(self) -> KafkaListener:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name=f"listener-{self.port}", daemon=True
        )
        self._thread.start()
        log.info("listening for Kafka clients on %s (port %d)", self.endpoint, self.port)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def serve_connection(self, sock: socket.socket, address: tuple[str, int]) -> None:
        peer = f"{address[0]}:{address[1]}"
        # As Kafka's broker: no Nagle. Responses are small and pipelined; with Nagle a response
        # written while the previous one is unacknowledged waits for the client's delayed ACK
        # (~40 ms on Linux), measured as 55 ms produce round trips of a transactional producer.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        answers: queue.Queue[_Answer | None] = queue.Queue(maxsize=_MAX_PIPELINED)
        writer = threading.Thread(
            target=self._write_answers,
            args=(sock, answers, peer, self.cluster.metrics),
            name=f"kafka-answers-{peer}",
            daemon=True,
        )
        writer.start()
        ordered: list[_Answer] = []  # unanswered requests that carried idempotent batches
        started_s = 0.0  # when the request being started was let through wait_for

        def wait_for(partitions: frozenset[tuple[str, int]]) -> None:
            """A request may start once no unanswered one of this connection carried idempotent
            batches for its partitions (their sequences depend on those outcomes)."""
            nonlocal started_s
            for earlier in ordered:
                if earlier.pending.ordered & partitions:
                    earlier.written.wait()
            ordered[:] = [a for a in ordered if not a.written.is_set()]
            started_s = time.monotonic()

        try:
            while True:
                cpu_s = time.thread_time()
                payload = read_frame(sock, self.max_bytes, peer)
                if payload is None:
                    return
                received_s = started_s = time.monotonic()
                answer = _Answer(start_request(payload, self.cluster, peer, wait_for))
                answer.api_key = int.from_bytes(payload[:2], "big", signed=True)
                answer.received_s, answer.queue_s = received_s, started_s - received_s
                answer.cpu_s = time.thread_time() - cpu_s
                answers.put(answer)
                if answer.pending.ordered:
                    ordered.append(answer)
        except (FrameError, ProtocolError) as exc:
            log.warning("closing the connection from %s: %s", peer, exc)
        except OSError as exc:
            log.info("connection from %s lost: %s", peer, exc)
        except Exception:
            log.exception("closing the connection from %s after a failed request", peer)
        finally:
            answers.put(None)  # the requests started so far are answered first
            writer.join()
            sock.close()

    @staticmethod
    def _write_answers(
        sock: socket.socket, answers: queue.Queue[_Answer | None], peer: str, metrics: BrokerMetrics
    ) -> None:
        """Answer the started requests in order; after a failure, only drain (the reader
        stops at its next read of the shut-down socket)."""
        broken = False
        while (answer := answers.get()) is not None:
            try:
                if not broken:
                    cpu_s = time.thread_time()
                    response = answer.pending.respond()
                    if response is not None:
                        write_frame(sock, response)
                    total_s = time.monotonic() - answer.received_s
                    cpu_s = answer.cpu_s + time.thread_time() - cpu_s
                    metrics.request_done(answer.api_key, answer.queue_s, total_s, cpu_s)
            except OSError as exc:
                log.info("connection from %s lost: %s", peer, exc)
                broken = True
            except Exception:
                log.exception("closing the connection from %s after a failed request", peer)
                broken = True
            finally:
                answer.written.set()
            if broken:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
