"""The broker's network thread and its TCP listeners for Kafka clients (``listeners``;
Kafka's SocketServer: acceptor and processor).

One thread runs an event loop that accepts and reads every connection of every listener
of the broker, so connections cost no thread and an idle one no CPU. Per connection, as
in Kafka:

* **a bounded amount in flight, in order**: a complete frame is handed to the
  :class:`~sparklog.broker.kafka.request_channel.RequestChannel`, and the connection's
  next frame is read only once that request was answered — or, when it may be pipelined
  (Produce without idempotent batches: its successors can join the same commit round),
  once it was started, up to :data:`DISK_PIPELINED_REQUESTS` requests and
  :data:`DISK_PIPELINED_BYTES` or, on an object store, :data:`STORE_PIPELINED_REQUESTS` and
  two rounds' bytes (``store.round.max.bytes``) unanswered. Responses
  are written in request order. A client sending faster than that
  keeps the rest in its socket; enough is read ahead that a round's latency does not cap a
  connection's requests per second;
* a response whose bytes the client does not take (the socket's send buffer full) also
  holds the next request back: memory per connection stays one request and one response;
* whatever goes wrong with one connection — an oversized or truncated frame, an unknown
  api key or version, an unreadable request, a handler failure — closes that connection
  only; a request that fails is closed on only once the requests before it (pipelined
  produces still committing) are answered and written. The broker and other clients carry
  on;
* what the handler threads report of a connection's requests (started, answered, failed) is
  applied on the network thread in their order, one wake-up of the loop for all that
  queued meanwhile, and the answers of one wake-up leave in one write.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from sparklog.broker.kafka.context import BrokerContext
from sparklog.broker.kafka.request_channel import RequestChannel
from sparklog.config import Endpoint
from sparklog.errors import ConfigError

__all__ = [
    "DISK_PIPELINED_BYTES",
    "DISK_PIPELINED_REQUESTS",
    "STORE_PIPELINED_REQUESTS",
    "KafkaListener",
    "NetworkThread",
]

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
# Unanswered requests one connection may have started, when they may share commit rounds
# (Produce without idempotent batches); any other request is read only once the earlier ones
# are answered, as Kafka's muted channel does. A client at linger.ms=0 sends one small request
# per record while the broker reads them. On a store the connection's throughput is this many
# requests per commit round's latency: 16 held a producer to ~160 requests/s on 100 ms rounds.
# On a disk (rounds of a millisecond or two) reading that far ahead only moves a flooding
# client's backlog out of its own queue, where librdkafka batches it, into the broker as
# one-record requests: case (n)'s 16 producers at 50k records/s got 3.6k delivered with 1,024
# (Kafka 17.1k in the same runs), 7.5k with 16 (Kafka 14.7k) (DESIGN §15). The bytes bound
# keeps a connection's memory bounded; on a store it is two rounds, because a connection's
# throughput is its unanswered bytes over a round's latency (DESIGN §16).
DISK_PIPELINED_REQUESTS = 16
STORE_PIPELINED_REQUESTS = 1024
DISK_PIPELINED_BYTES = 8 * 1024 * 1024


class NetworkThread:
    """One event loop on a daemon thread, serving every listener of a broker."""

    def __init__(self, name: str = "kafka-network") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)

    def start(self) -> NetworkThread:
        self._thread.start()
        return self

    def run(self, coroutine: Any, timeout_s: float = 10.0) -> Any:
        """Run ``coroutine`` on the loop and return its result (from another thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)


class KafkaListener:
    """One listener (``NAME://host:port``) serving Kafka requests from ``cluster``: bound at
    construction (so its port is known), accepting once started."""

    def __init__(
        self,
        endpoint: Endpoint,
        cluster: BrokerContext,
        socket_request_max_bytes: int,
        network: NetworkThread,
        channel: RequestChannel,
        pipelined_requests: int = DISK_PIPELINED_REQUESTS,
        pipelined_bytes: int = DISK_PIPELINED_BYTES,
    ) -> None:
        self.endpoint = endpoint
        self.cluster = cluster
        self.max_bytes = socket_request_max_bytes
        self.pipelined_requests = pipelined_requests
        self.pipelined_bytes = pipelined_bytes
        self._network = network
        self._channel = channel
        host = endpoint.host or "0.0.0.0"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, endpoint.port))
            self._socket.listen(1024)
        except OSError as exc:
            self._socket.close()
            raise ConfigError(
                f"Cannot listen on {endpoint} (listeners): {exc.strerror}; choose a free port or another host"
            ) from exc
        self._socket.setblocking(False)
        self._server: asyncio.Server | None = None
        self._connections: set[_KafkaConnection] = set()

    @property
    def port(self) -> int:
        """The port bound (the configured one, or the one the OS chose for port 0)."""
        return int(self._socket.getsockname()[1])

    def start(self) -> KafkaListener:
        async def serve() -> asyncio.Server:
            return await self._network.loop.create_server(lambda: _KafkaConnection(self), sock=self._socket)

        self._server = self._network.run(serve())
        log.info("listening for Kafka clients on %s (port %d)", self.endpoint, self.port)
        return self

    def stop(self) -> None:
        server = self._server
        if server is None:
            self._socket.close()
            return

        async def close() -> None:
            server.close()
            for connection in list(self._connections):
                connection.close()

        self._network.run(close())


class _Slot:
    """One request of a connection, from its frame to its response (what the handlers get)."""

    __slots__ = (
        "answered",
        "connection",
        "cpu_s",
        "frame",
        "is_started",
        "payload",
        "peer",
        "pipelined",
        "queue_s",
        "received_s",
        "submitted",
    )

    def __init__(self, connection: _KafkaConnection, payload: bytes) -> None:
        self.connection = connection
        self.peer = connection.peer
        self.payload = payload
        self.received_s = time.monotonic()
        self.queue_s = 0.0
        self.cpu_s = 0.0
        self.submitted = False
        self.is_started = False
        self.pipelined = False
        self.answered = False
        self.frame: bytes | None = None

    def started(self, pipelined: bool) -> None:
        self.connection.post(self.connection._started, self, pipelined)

    def respond(self, frame: bytes | None) -> None:
        self.connection.post(self.connection._answered, self, frame)

    def fail(self, reason: str) -> None:
        self.connection.post(self.connection._failed, self, reason)

    def give_back(self) -> None:
        """Not started after all, nor the later ones (an earlier one is not pipelined)."""
        self.connection.post(self.connection._given_back, self)


class _KafkaConnection(asyncio.Protocol):
    """One client connection; everything here runs on the network thread (handlers reach
    it through :class:`_Slot`)."""

    def __init__(self, listener: KafkaListener) -> None:
        self.listener = listener
        self.loop = listener._network.loop
        self.peer = "?"
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._slots: deque[_Slot] = deque()  # read, not yet answered; in request order
        self._slots_bytes = 0  # their payloads' bytes
        self._write_paused = False
        self._eof = False
        self._closing = False
        self._failure: str | None = None  # a request failed: closing once the earlier are answered
        # What the handlers report (started, answered, failed), in their order, applied on
        # the network thread by one wake-up for all that queued meanwhile: a commit round
        # answers its requests together, and one wake-up of the loop per answer (a write to
        # its self-pipe, a read on the other side) cost more than the answers' encoding.
        self._events: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._events_lock = threading.Lock()
        self._drain_scheduled = False
        self._outbox: list[bytes] = []  # response frames in order, written at the end of a drain

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        address = transport.get_extra_info("peername")
        self.peer = f"{address[0]}:{address[1]}" if address else "?"
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # As Kafka's broker: no Nagle. A response written while the previous one is
            # unacknowledged would otherwise wait for the client's delayed ACK (~40 ms).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.listener._connections.add(self)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._next()

    def eof_received(self) -> bool | None:
        self._eof = True  # the requests it sent before are still answered, then it is closed
        self._next()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self.listener._connections.discard(self)
        if exc is not None:
            log.info("connection from %s lost: %s", self.peer, exc)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._next()

    # -- from handler threads ------------------------------------------------------------------
    def post(self, event: Callable[..., None], *args: Any) -> None:
        """Run ``event(*args)`` on the network thread after the events posted before it."""
        self._events.append((event, args))
        with self._events_lock:
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._events_lock:
            self._drain_scheduled = False  # an event posted from now on schedules a drain
        events = self._events
        while events:
            event, args = events.popleft()
            event(*args)
        self._write_answers()
        self._next()

    def _write_answers(self) -> None:
        """The answers of the drain in one write (one send), not a send each."""
        if self._outbox:
            if not self._closing and self._transport is not None:
                self._transport.write(b"".join(self._outbox))
            self._outbox.clear()

    # -- requests in, responses out ------------------------------------------------------------
    def _next(self) -> None:
        """Read the buffered complete frames (up to the bound) and hand the ones that may
        start to the handlers, as one batch, in order."""
        transport = self._transport
        if transport is None or self._closing:
            return
        slots = self._slots
        if self._failure is not None:
            if not slots:  # the requests before the failed one are answered and written
                self._fail(self._failure)
            return
        buffer = self._buffer
        while self._room() and len(buffer) >= _SIZE.size:
            (size,) = _SIZE.unpack_from(buffer)
            if size < 0 or size > self.listener.max_bytes:
                self._fail(
                    f"frame of {size} bytes is outside 0..socket.request.max.bytes ({self.listener.max_bytes}); "
                    "is the client speaking the Kafka protocol?"
                )
                return
            if len(buffer) < _SIZE.size + size:
                break
            slots.append(_Slot(self, bytes(buffer[_SIZE.size : _SIZE.size + size])))
            self._slots_bytes += size
            del buffer[: _SIZE.size + size]
        batch = []
        waiting = False  # a request read but held back until an earlier one is answered
        for slot in slots:
            if not slot.submitted:
                slot.submitted = True
                batch.append(slot)
            elif not (slot.answered or (slot.is_started and slot.pipelined)):
                waiting = True  # the next request waits for this one's answer (or its start)
                break
        if batch:
            self.listener._channel.submit(batch, self.listener.cluster)
        if self._eof and not slots:
            if buffer:
                log.warning(
                    "closing the connection from %s: it closed after %d bytes of an incomplete frame",
                    self.peer,
                    len(buffer),
                )
            self.close()
        elif self._write_paused or waiting or not self._room():
            transport.pause_reading()  # the socket holds the rest: the client batches meanwhile
        else:
            transport.resume_reading()

    def _room(self) -> bool:
        """Whether another request may be read while the unanswered ones wait."""
        return len(self._slots) < self.listener.pipelined_requests and self._slots_bytes < self.listener.pipelined_bytes

    def close(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.close()

    # The events below run by :meth:`_drain`, which reads on (:meth:`_next`) after them.
    def _started(self, slot: _Slot, pipelined: bool) -> None:
        slot.is_started, slot.pipelined = True, pipelined

    def _given_back(self, slot: _Slot) -> None:
        later = False
        for each in self._slots:
            later = later or each is slot
            if later and not each.is_started:
                each.submitted = False

    def _answered(self, slot: _Slot, frame: bytes | None) -> None:
        slot.answered, slot.frame = True, frame
        slots = self._slots
        while slots and slots[0].answered:
            done = slots.popleft()
            self._slots_bytes -= len(done.payload)
            if done.frame is not None:
                self._outbox += (_SIZE.pack(len(done.frame)), done.frame)

    def _failed(self, slot: _Slot, reason: str) -> None:
        """``slot``'s request cannot be answered: it and the requests read after it are
        dropped, reading stops, and the connection closes once the earlier ones (pipelined
        produces still committing) are answered."""
        if self._failure is None:
            self._failure = reason
        slots = self._slots
        if slot in slots:
            while (dropped := slots.pop()) is not slot:
                self._slots_bytes -= len(dropped.payload)
            self._slots_bytes -= len(slot.payload)
        if self._transport is not None:
            self._transport.pause_reading()

    def _fail(self, reason: str) -> None:
        self._write_answers()  # the earlier requests' answers go out before the close
        if not self._closing:
            log.warning("closing the connection from %s: %s", self.peer, reason)
        self.close()
