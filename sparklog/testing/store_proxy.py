"""A counting proxy in front of an S3 server, for tests that check what sparklog asks of a
store (DESIGN §16: requests per commit round, none while idle).

Runs as a child process (:class:`CountingProxy`; ``python -m sparklog.testing.store_proxy``):
a proxy in the test's own process would never answer delta-rs calls that hold the GIL
while they wait. Every request is forwarded as it came and counted by kind — ``LIST``
(``GET ?list-type=2``), ``GET``, ``HEAD``, ``PUT``, ``PUT_IF_ABSENT`` (a PUT with
``If-None-Match: *``), ``DELETE``, ``POST`` — and by answer (``PUT_IF_ABSENT 412``).
``GET /_proxy/counts`` answers the counts as JSON, ``POST /_proxy/reset`` zeroes them (no
bucket name starts with ``_``, so neither is ever an S3 request).
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import urllib.parse
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from sparklog.testing.brokers import free_port
from sparklog.testing.object_stores import S3ServerProcess

__all__ = ["CountingProxy", "request_kind"]

_CONTROL = "/_proxy/"
# Hop-by-hop headers are the proxy's own business (RFC 9110, section 7.6.1).
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


def request_kind(method: str, target: str, if_none_match: str | None) -> str:
    """What an S3 request is, by method and query (pure)."""
    query = urllib.parse.parse_qs(urlsplit(target).query)
    if method == "GET" and "list-type" in query:
        return "LIST"
    if method == "PUT" and if_none_match == "*":
        return "PUT_IF_ABSENT"
    return method


class _Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def add(self, kind: str, status: int) -> None:
        with self.lock:
            self.counts[kind] += 1
            if status >= 400:
                self.counts[f"{kind} {status}"] += 1


def _handler(upstream: str, counts: _Counts) -> type[BaseHTTPRequestHandler]:
    target_host = urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return

        def _control(self) -> None:
            if self.path == f"{_CONTROL}counts":
                with counts.lock:
                    body = json.dumps(dict(counts.counts)).encode()
            elif self.path == f"{_CONTROL}reset":
                with counts.lock:
                    counts.counts.clear()
                body = b"{}"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _forward(self) -> None:
            if self.path.startswith(_CONTROL):
                self._control()
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            connection = http.client.HTTPConnection(target_host.hostname or "127.0.0.1", target_host.port, timeout=60)
            try:
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
            finally:
                connection.close()
            counts.add(request_kind(self.command, self.path, self.headers.get("If-None-Match")), response.status)
            self.send_response(response.status)
            for key, value in response.getheaders():
                if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _forward

    return Handler


class CountingProxy(S3ServerProcess):
    """The proxy as a child process in front of ``upstream`` (an S3 server's endpoint);
    :attr:`endpoint` is what clients use instead, :meth:`counts` what they asked."""

    name = "the counting store proxy"

    def __init__(self, directory: Path, upstream: S3ServerProcess) -> None:
        super().__init__(directory)
        self.upstream = upstream
        self._key_id, self._secret = upstream._key_id, upstream._secret

    def _command(self) -> list[str]:
        module = "sparklog.testing.store_proxy"
        return [sys.executable, "-m", module, "--upstream", self.upstream.endpoint, "--port", str(self.port)]

    def counts(self) -> dict[str, int]:
        with urllib.request.urlopen(f"{self.endpoint}{_CONTROL}counts", timeout=10) as response:
            return {str(k): int(v) for k, v in json.loads(response.read()).items()}

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.endpoint}{_CONTROL}reset", method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()


def main() -> None:
    parser = argparse.ArgumentParser(description="A counting proxy in front of an S3 server (tests only).")
    parser.add_argument("--upstream", required=True, help="the S3 server's endpoint, http://host:port")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (127.0.0.1); 0 picks a free one")
    arguments = parser.parse_args()
    port = arguments.port or free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(arguments.upstream, _Counts()))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
