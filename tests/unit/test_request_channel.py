"""The request channel lets go of an answered request at once: a delayed request's expiry
timer stays queued until its deadline, and must not keep the request (and its payload, up to
a megabyte for a Produce) alive until then."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Callable, Iterator

import pytest

from sparklog.broker.kafka.apis import StartedRequest
from sparklog.broker.kafka.context import EncodedResponse
from sparklog.broker.kafka.request_channel import RequestChannel, _Waiting
from tests.helpers import wait_until


class _Client:
    """One request of a connection (the channel's view of it); records what was answered."""

    def __init__(self, payload: bytes, answers: list[bytes | None]) -> None:
        self.peer = "test:1"
        self.payload = payload
        self.received_s = time.monotonic()
        self.queue_s = 0.0
        self.cpu_s = 0.0
        self._answers = answers
        self.answered_on: list[str] = []  # the threads that answered it

    def started(self, pipelined: bool) -> None:
        pass

    def respond(self, frame: bytes | None) -> None:
        self.answered_on.append(threading.current_thread().name)
        self._answers.append(frame)

    def fail(self, reason: str) -> None:
        raise AssertionError(f"the request failed: {reason}")

    def give_back(self) -> None:
        pass


class _AnsweredWhenWoken:
    """A delayed response that completes after its first wake-up; expires in a minute."""

    def __init__(self) -> None:
        self.deadline_s = time.monotonic() + 60.0
        self.recheck_s: float | None = 30.0
        self.pipelined = False
        self.completes_on_wake = False
        self.woken = threading.Event()
        self.wake: Callable[[], None] | None = None

    def try_complete(self) -> EncodedResponse | None:
        return EncodedResponse(b"done") if self.woken.is_set() else None

    def on_progress(self, wake: Callable[[], None]) -> None:
        self.wake = wake

    def expire(self) -> EncodedResponse:
        return EncodedResponse(b"expired")


@pytest.fixture
def channel() -> Iterator[RequestChannel]:
    running = RequestChannel(io_threads=2).start()
    try:
        yield running
    finally:
        running.close()


def test_an_answered_request_is_freed_before_its_timers_fire(channel: RequestChannel) -> None:
    answers: list[bytes | None] = []
    client = _Client(b"x" * (1 << 20), answers)
    delayed = _AnsweredWhenWoken()
    started = StartedRequest(api_key=0, api_version=9, correlation_id=1, delayed=delayed)
    channel._try(_Waiting(client, started, delayed))
    assert answers == [] and delayed.wake is not None  # waiting, its timers armed

    gone = weakref.ref(client)
    del client, started
    delayed.woken.set()
    delayed.wake()
    wait_until(lambda: answers == [b"done"], "the answer after the wake-up")
    gc.collect()
    assert gone() is None, "the answered request is still held (by its expiry and recheck timers)"


def test_a_cheap_delayed_response_is_answered_on_the_thread_that_wakes_it(channel: RequestChannel) -> None:
    """A produce's answer is its batches' outcomes: the committer that wakes it answers it,
    no handler thread is woken for it; any other delayed response goes back to a handler."""
    for completes_on_wake, expected in ((True, "committer"), (False, "kafka-request-handler")):
        client = _Client(b"p", [])
        delayed = _AnsweredWhenWoken()
        delayed.completes_on_wake = completes_on_wake
        started = StartedRequest(api_key=0, api_version=9, correlation_id=1, delayed=delayed)
        channel._try(_Waiting(client, started, delayed))
        assert delayed.wake is not None

        def commit(wake: Callable[[], None] = delayed.wake, woken: threading.Event = delayed.woken) -> None:
            woken.set()
            wake()

        committer = threading.Thread(target=commit, name="committer")
        committer.start()
        committer.join()
        answered_on = client.answered_on
        wait_until(lambda: len(answered_on) == 1, "the answer after the wake-up")
        assert answered_on[0].startswith(expected), answered_on
