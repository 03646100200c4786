"""A proxy in front of an S3 server that counts what sparklog asks of a store and injects the
faults and latency of a real one (DESIGN §16), for tests and benchmarks.

Runs as a child process (:class:`StoreProxy`; ``python -m sparklog.testing.store_proxy``):
a proxy in the test's own process would never answer delta-rs calls that hold the GIL
while they wait. Every request is counted by kind — ``LIST`` (``GET ?list-type=2``), ``GET``,
``HEAD``, ``PUT``, ``PUT_IF_ABSENT`` (a PUT with ``If-None-Match: *``), ``DELETE``, ``POST`` —
and by answer (``PUT_IF_ABSENT 412``), then handled as the :class:`FaultPlan` in force says:

* delayed by a latency drawn from a log-normal distribution with the plan's median and 99th
  percentile (:data:`EXPRESS`, :data:`STANDARD`: S3 Express One Zone and S3 Standard PUTs);
* answered ``503 SlowDown`` or ``500 InternalError`` without reaching the store (counted as
  ``fault 503`` / ``fault 500``);
* a PUT forwarded (it lands) and its connection then closed unanswered, as a client timing
  out after its write landed sees it (``fault lost answer``);
* with ``strip_conditions``, ``If-None-Match`` and ``If-Match`` removed before forwarding: a
  conditional create then overwrites, as a store that ignores the headers does. The probe
  objects of sparklog's store proof (``_sparklog/probes/``) are spared, as a store whose bug
  the proof did not catch: brokers restarted meanwhile still start. A stripped create of a
  ``_delta_log`` commit that replaces one already there is counted ``overwritten``: the race a
  conditional create would have refused, so a test can wait until the bug really struck.

Control requests (no bucket name starts with ``_``, so none is an S3 request):
``GET /_proxy/counts`` (JSON), ``POST /_proxy/reset`` (zero the counts), ``POST
/_proxy/faults`` with a plan as JSON (``{}``: none). Decisions are drawn from a seeded random
generator, one per proxy, so a failing run's faults are the plan's and its seed's.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import random
import re
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sparklog.testing.brokers import free_port
from sparklog.testing.object_stores import S3ServerProcess

__all__ = ["EXPRESS", "STANDARD", "FaultPlan", "StoreProxy", "latency_ms", "request_kind"]

_CONTROL = "/_proxy/"
# Hop-by-hop headers are the proxy's own business (RFC 9110, section 7.6.1).
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
_CONDITIONS = {"if-none-match", "if-match"}
_PROBES = "/_sparklog/probes/"  # sparklog.log.object_store's proof objects
_COMMIT = re.compile(r"/_delta_log/\d{20}\.json$")
_Z_99 = 2.3263478740408408  # the standard normal's 99th percentile


@dataclass(frozen=True)
class FaultPlan:
    """What the proxy does to S3 requests; each fault is a fraction of requests, drawn
    independently per request."""

    slow_down: float = 0.0  # answered 503 SlowDown, not forwarded
    internal_error: float = 0.0  # answered 500 InternalError, not forwarded
    lost_answer: float = 0.0  # of PUTs: forwarded (they land), then the connection closed unanswered
    latency_p50_ms: float = 0.0  # added to every request: a log-normal with this median ...
    latency_p99_ms: float = 0.0  # ... and this 99th percentile (0: no latency)
    strip_conditions: bool = False  # If-None-Match / If-Match removed: conditional creates overwrite
    seed: int = 0

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> FaultPlan:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown fault plan keys {unknown}; known: {sorted(known)}")
        return cls(**raw)


EXPRESS = FaultPlan(latency_p50_ms=5.0, latency_p99_ms=15.0)  # S3 Express One Zone PUTs
STANDARD = FaultPlan(latency_p50_ms=60.0, latency_p99_ms=200.0)  # S3 Standard PUTs


def latency_ms(plan: FaultPlan, draw: float) -> float:
    """The latency for a standard-normal ``draw`` under ``plan`` (pure): log-normal with the
    plan's median and 99th percentile."""
    if plan.latency_p50_ms <= 0:
        return 0.0
    sigma = math.log(max(plan.latency_p99_ms, plan.latency_p50_ms) / plan.latency_p50_ms) / _Z_99
    return plan.latency_p50_ms * math.exp(sigma * draw)


def request_kind(method: str, target: str, if_none_match: str | None) -> str:
    """What an S3 request is, by method and query (pure)."""
    query = urllib.parse.parse_qs(urlsplit(target).query)
    if method == "GET" and "list-type" in query:
        return "LIST"
    if method == "PUT" and if_none_match == "*":
        return "PUT_IF_ABSENT"
    return method


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.plan = FaultPlan()
        self.random = random.Random(0)

    def count(self, kind: str, status: int | None = None) -> None:
        with self.lock:
            self.counts[kind] += 1
            if status is not None and status >= 400:
                self.counts[f"{kind} {status}"] += 1

    def set_plan(self, plan: FaultPlan) -> None:
        with self.lock:
            self.plan, self.random = plan, random.Random(plan.seed)

    def decide(self, method: str) -> tuple[FaultPlan, float, str | None]:
        """The plan, a latency (ms) and the fault for one request (None: forward it)."""
        with self.lock:
            plan, draw = self.plan, self.random
            latency = latency_ms(plan, draw.gauss(0.0, 1.0))
            roll = draw.random()
        if roll < plan.slow_down:
            return plan, latency, "503"
        if roll < plan.slow_down + plan.internal_error:
            return plan, latency, "500"
        if method == "PUT" and roll < plan.slow_down + plan.internal_error + plan.lost_answer:
            return plan, latency, "lost answer"
        return plan, latency, None


_ERRORS = {
    "503": (503, "SlowDown", "Please reduce your request rate."),
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
}


def _handler(upstream: str, state: _State) -> type[BaseHTTPRequestHandler]:
    target_host = urlsplit(upstream)

    def upstream_connection() -> http.client.HTTPConnection:
        return http.client.HTTPConnection(target_host.hostname or "127.0.0.1", target_host.port, timeout=60)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # An answer is written as headers, then body: with Nagle's algorithm on, a client's
        # delayed ACK held every answer on a kept-alive connection for 40 ms.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: object) -> None:
            return

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _control(self, body: bytes | None) -> None:
            if self.path == f"{_CONTROL}counts":
                with state.lock:
                    answer = json.dumps(dict(state.counts)).encode()
            elif self.path == f"{_CONTROL}reset":
                with state.lock:
                    state.counts.clear()
                answer = b"{}"
            elif self.path == f"{_CONTROL}faults":
                try:
                    state.set_plan(FaultPlan.from_json(json.loads(body or b"{}")))
                except (ValueError, TypeError) as exc:
                    self._answer(400, str(exc).encode(), "text/plain")
                    return
                answer = b"{}"
            else:
                self.send_error(404)
                return
            self._answer(200, answer, "application/json")

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if self.path.startswith(_CONTROL):
                self._control(body)
                return
            kind = request_kind(self.command, self.path, self.headers.get("If-None-Match"))
            plan, latency, fault = state.decide(self.command)
            if latency:
                time.sleep(latency / 1000)
            if fault in _ERRORS:
                status, code, message = _ERRORS[fault]
                state.count(kind, status)
                state.count(f"fault {fault}")
                xml = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message></Error>'
                self._answer(status, xml.encode(), "application/xml")
                return
            stripped = plan.strip_conditions and _PROBES not in self.path
            dropped = {k.lower() for k in self.headers} & _CONDITIONS if stripped else set()
            headers = {
                k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP and k.lower() not in dropped
            }
            if (
                "if-none-match" in dropped
                and _COMMIT.search(urlsplit(self.path).path)
                and self._exists_upstream(headers)
            ):
                state.count("overwritten")
            connection = upstream_connection()
            try:
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
            finally:
                connection.close()
            state.count(kind, response.status)
            if fault == "lost answer":
                state.count("fault lost answer")
                self.close_connection = True  # the write landed; its writer never hears of it
                return
            self.send_response(response.status)
            for key, value in response.getheaders():
                if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _exists_upstream(self, headers: dict[str, str]) -> bool:
            # The PUT's credentials (the test's store checks who asks, not the signature).
            asking = {
                k: v for k, v in headers.items() if k.lower() == "authorization" or k.lower().startswith("x-amz-")
            }
            connection = upstream_connection()
            try:
                connection.request("HEAD", self.path, headers=asking)
                response = connection.getresponse()
                response.read()
                return response.status == 200
            finally:
                connection.close()

        do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _forward

    return Handler


class StoreProxy(S3ServerProcess):
    """The proxy as a child process in front of ``upstream`` (an S3 server); :attr:`endpoint`
    is what clients use instead, :meth:`counts` what they asked, :meth:`inject` the faults."""

    name = "the store proxy"

    def __init__(self, directory: Path, upstream: S3ServerProcess) -> None:
        super().__init__(directory)
        self.upstream = upstream
        self._key_id, self._secret = upstream._key_id, upstream._secret

    def _command(self) -> list[str]:
        module = "sparklog.testing.store_proxy"
        return [sys.executable, "-m", module, "--upstream", self.upstream.endpoint, "--port", str(self.port)]

    def _call(self, action: str, method: str = "GET", data: bytes | None = None) -> bytes:
        request = urllib.request.Request(f"{self.endpoint}{_CONTROL}{action}", method=method, data=data)
        with urllib.request.urlopen(request, timeout=10) as response:
            return bytes(response.read())

    def counts(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in json.loads(self._call("counts")).items()}

    def reset(self) -> None:
        self._call("reset", "POST", b"")

    def inject(self, plan: FaultPlan) -> None:
        """From now on, handle requests as ``plan`` says (``FaultPlan()``: forward them as they are)."""
        self._call("faults", "POST", json.dumps(asdict(plan)).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default backlog of 5 overflowed (SYN flooding) under load


def main() -> None:
    parser = argparse.ArgumentParser(description="A counting, fault-injecting proxy in front of an S3 server.")
    parser.add_argument("--upstream", required=True, help="the S3 server's endpoint, http://host:port")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (127.0.0.1); 0 picks a free one")
    arguments = parser.parse_args()
    port = arguments.port or free_port()
    server = _Server(("127.0.0.1", port), _handler(arguments.upstream, _State()))
    server.serve_forever()


if __name__ == "__main__":
    main()
