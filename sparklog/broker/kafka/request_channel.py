"""Requests from the network thread to the request handlers, responses back (Kafka's
RequestChannel, KafkaRequestHandlerPool and the purgatories' expiration reaper).

A fixed pool of handler threads (``num.io.threads``) takes requests in arrival order,
parses and starts them (:func:`~sparklog.broker.kafka.apis.start_request`) and hands the
response frame to the connection. What waits does not hold a handler:

* a :class:`~sparklog.broker.kafka.context.DelayedResponse` (a produce waiting for its
  commit, a fetch waiting for data) is tried again on a handler when it is woken, when its
  re-check interval passes, and answered by ``expire`` at its deadline — exactly once. One
  whose try is cheap (``completes_on_wake``: a produce, whose answer is its batches'
  outcomes) is tried on the thread that wakes it, the committer answering its round;
* a :class:`~sparklog.broker.kafka.context.Deferred` (a JoinGroup waiting for the group's
  other members) blocks a thread of a separate, growing pool.

Each answered request is reported to the broker's metrics
(:meth:`~sparklog.broker.metrics.BrokerMetrics.request_done`): its total time (frame read
to response handed to the network thread), its queue time (frame read to a handler taking
it up: Kafka's RequestQueueTime) and the handler CPU time it took (parse, handle, encode).

Invariants: every request handed in gets exactly one :meth:`Request.respond` call (with
a frame, or None when Kafka answers nothing), or :meth:`Request.fail` when it cannot be
answered; one connection's requests start in their order because the network thread hands
in a connection's next request only after the previous one was started (and answered,
unless the previous one may be pipelined).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from sparklog.broker.kafka.apis import ProtocolError, StartedRequest, start_request
from sparklog.broker.kafka.context import BrokerContext, DelayedResponse
from sparklog.broker.metrics import BrokerMetrics

__all__ = ["Request", "RequestChannel"]

log = logging.getLogger(__name__)

_BLOCKING_THREADS = 256  # JoinGroup/SyncGroup waits at once; more queue


class Request(Protocol):
    """One request frame and its way back to its client connection, as the handlers see
    it; every method may be called from any thread."""

    peer: str
    payload: bytes
    received_s: float  # monotonic, when the network thread read its frame
    queue_s: float  # from then until a handler took it up (Kafka's RequestQueueTime)
    cpu_s: float  # handler CPU time spent on it so far (parse, handle, encode)

    def started(self, pipelined: bool) -> None:
        """The request was started; ``pipelined``: the connection's next request may be
        read and started before this one is answered."""

    def respond(self, frame: bytes | None) -> None:
        """Send ``frame`` (None: nothing to send) once the earlier requests' are."""

    def fail(self, reason: str) -> None:
        """Close the connection after the earlier requests' responses (an unanswerable request)."""

    def give_back(self) -> None:
        """This request and the later ones handed in with it are not started: an earlier
        one must be answered first."""


@dataclass(eq=False)
class _Waiting:
    """A started request whose response is delayed."""

    connection: Request
    started: StartedRequest
    delayed: DelayedResponse
    lock: threading.Lock = field(default_factory=threading.Lock)
    answered: bool = False
    busy: bool = False  # a handler is trying it
    again: bool = False  # woken while busy: try once more
    expire_next: bool = False
    expiry_armed: bool = False
    recheck_armed: bool = False
    handle: _Handle = field(init=False)

    def __post_init__(self) -> None:
        self.handle = _Handle(self)


@dataclass(eq=False)
class _Handle:
    """What timers and wake-ups hold of a waiting request. Its expiry timer stays in the heap
    until the deadline (``request.timeout.ms``, 30 s by default) however soon the request is
    answered; through the handle, emptied on the answer, the request and its payload (a
    Produce of up to a megabyte) are freed at once, not 30 s later."""

    waiting: _Waiting | None


class RequestChannel:
    """Handler threads serving the requests of one broker's listeners (``context`` per
    listener: requests carry theirs)."""

    def __init__(self, io_threads: int, metrics: BrokerMetrics | None = None, name: str = "kafka") -> None:
        self._metrics = metrics
        self._tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-request-handler-{i}", daemon=True)
            for i in range(io_threads)
        ]
        self._blocking = ThreadPoolExecutor(_BLOCKING_THREADS, thread_name_prefix=f"{name}-delayed")
        self._timers = _Timers(self._tasks.put, name)
        self._closed = False

    def start(self) -> RequestChannel:
        for thread in self._threads:
            thread.start()
        self._timers.start()
        return self

    def close(self) -> None:
        self._closed = True
        for _ in self._threads:
            self._tasks.put(None)
        for thread in self._threads:
            if thread.is_alive():
                thread.join(5)
        self._timers.close()
        self._blocking.shutdown(wait=False, cancel_futures=True)

    def submit(self, requests: Sequence[Request], context: BrokerContext) -> None:
        """Hand in consecutive requests of one connection (from the network thread): they
        are started in order, as long as each may be pipelined; the rest are given back."""
        self._tasks.put(lambda: self._start_all(requests, context))

    # -- on handler threads ---------------------------------------------------------------------
    def _serve(self) -> None:
        while (task := self._tasks.get()) is not None:
            try:
                task()
            except Exception:  # a handler's bug must not take the pool's thread with it
                log.exception("a request handler task failed")

    def _start_all(self, requests: Sequence[Request], context: BrokerContext) -> None:
        for i, request in enumerate(requests):
            if not self._start(request, context):
                if i + 1 < len(requests):
                    requests[i + 1].give_back()
                return

    def _start(self, request: Request, context: BrokerContext) -> bool:
        """Start one request; whether the next may start before it is answered."""
        cpu_s = time.thread_time()
        self._queued(request)
        try:
            started = start_request(request.payload, context, request.peer)
        except ProtocolError as exc:
            request.fail(str(exc))
            return False
        except Exception as exc:
            log.exception("closing the connection from %s after a failed request", request.peer)
            request.fail(f"{type(exc).__name__}: {exc}")
            return False
        request.started(started.pipelined)
        request.cpu_s += time.thread_time() - cpu_s
        if started.delayed is not None:
            self._try(_Waiting(request, started, started.delayed))
        elif started.deferred is not None:
            self._blocking.submit(self._finish_blocking, request, started)
        else:
            self._send(request, started, started.response)
        return started.pipelined

    def _try(self, waiting: _Waiting, expired: bool = False) -> None:
        """Try ``waiting``: answer it, or arrange its next try. One thread tries a request at
        a time; a wake-up meanwhile makes that thread try once more."""
        with waiting.lock:
            if waiting.answered:
                return
            if waiting.busy:
                waiting.again = True
                waiting.expire_next |= expired
                return
            waiting.busy = True
        while True:
            response, failure = self._attempt(waiting, expired)
            with waiting.lock:
                if response is None and failure is None and waiting.again:
                    expired, waiting.again, waiting.expire_next = waiting.expire_next, False, False
                    continue
                waiting.busy = False
                if response is None and failure is None:
                    return
                waiting.answered = True
            break
        waiting.handle.waiting = None
        if failure is not None:
            waiting.connection.fail(failure)
        else:
            self._send(waiting.connection, waiting.started, response)

    def _attempt(self, waiting: _Waiting, expired: bool) -> tuple[Any, str | None]:
        """``(response, None)``, ``(None, why the connection fails)``, or ``(None, None)``
        after arranging the next try."""
        delayed = waiting.delayed
        cpu_s = time.thread_time()
        try:
            expired = expired or time.monotonic() >= delayed.deadline_s
            response = delayed.expire() if expired else delayed.try_complete()
            if response is not None:
                return response, None
            handle = waiting.handle
            if not waiting.expiry_armed:
                waiting.expiry_armed = True
                self._timers.at(delayed.deadline_s, lambda: self._try_handle(handle, expired=True))
            if delayed.recheck_s is not None and not waiting.recheck_armed:
                waiting.recheck_armed = True
                recheck_at = min(delayed.deadline_s, time.monotonic() + delayed.recheck_s)
                self._timers.at(recheck_at, lambda: self._recheck(handle))
            if delayed.completes_on_wake:
                delayed.on_progress(lambda: self._try_handle(handle))
            else:
                delayed.on_progress(lambda: self._tasks.put(lambda: self._try_handle(handle)))
            return None, None
        except Exception as exc:
            log.exception("closing the connection from %s after a failed request", waiting.connection.peer)
            return None, f"{type(exc).__name__}: {exc}"
        finally:
            waiting.connection.cpu_s += time.thread_time() - cpu_s

    def _try_handle(self, handle: _Handle, expired: bool = False) -> None:
        waiting = handle.waiting
        if waiting is not None:  # None: answered meanwhile
            self._try(waiting, expired)

    def _recheck(self, handle: _Handle) -> None:
        waiting = handle.waiting
        if waiting is not None:
            waiting.recheck_armed = False
            self._try(waiting)

    def _finish_blocking(self, connection: Request, started: StartedRequest) -> None:
        assert started.deferred is not None
        try:
            response = started.deferred.finish()
        except Exception as exc:
            log.exception("closing the connection from %s after a failed request", connection.peer)
            connection.fail(f"{type(exc).__name__}: {exc}")
            return
        self._send(connection, started, response)

    def _send(self, request: Request, started: StartedRequest, response: Any) -> None:
        cpu_s = time.thread_time()
        try:
            frame = started.frame(response)
        except Exception as exc:
            log.exception("closing the connection from %s: its response could not be encoded", request.peer)
            request.fail(f"{type(exc).__name__}: {exc}")
            return
        request.cpu_s += time.thread_time() - cpu_s
        request.respond(frame)
        if self._metrics is not None:
            self._metrics.request_done(
                started.api_key,
                started.api_version,
                request.queue_s,
                time.monotonic() - request.received_s,
                request.cpu_s,
            )

    @staticmethod
    def _queued(request: Request) -> None:
        """Kafka's RequestQueueTime: from the frame read to a handler taking it up."""
        request.queue_s = time.monotonic() - request.received_s


class _Timers:
    """Runs callbacks at monotonic times by handing them to ``run`` (the handler queue). A
    timer firing for an answered request finds it answered and does nothing, so nothing is
    cancelled; the heap holds at most a few entries per waiting request."""

    def __init__(self, run: Callable[[Callable[[], None]], None], name: str) -> None:
        self._run = run
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._condition = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"{name}-request-timers", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify()
        if self._thread.is_alive():
            self._thread.join(5)

    def at(self, when_s: float, callback: Callable[[], None]) -> None:
        with self._condition:
            heapq.heappush(self._heap, (when_s, next(self._order), callback))
            if self._heap[0][2] is callback:
                self._condition.notify()

    def _loop(self) -> None:
        with self._condition:
            while not self._closed:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    self._run(heapq.heappop(self._heap)[2])
                timeout = self._heap[0][0] - now if self._heap else None
                self._condition.wait(timeout)
