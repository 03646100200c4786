"""What answers at a ZooKeeper address that does not let a session connect: ZooKeeper itself,
a Kafka listener, some other server, or nothing that tells.

Kafka's tools take ``--bootstrap-server host:9092``; sparklog's find the cluster through
ZooKeeper (there ``--bootstrap-server`` is an alias of ``--zookeeper``), so the Kafka habit
points the ZooKeeper client at a Kafka listener, which it would retry for the whole
connection timeout. :class:`~sparklog.metadata.session.ZkSession` asks :func:`wrong_service`
once a session is late, and fails at once with directions when the address is not ZooKeeper.

Two probes per address, each one short exchange on a connection of its own:

* ZooKeeper's ``srvr`` four-letter word, which a ZooKeeper server answers on its client port:
  with its version, "This ZooKeeper instance is not currently serving requests" (starting,
  or no quorum), or (ZooKeeper 3.5+, command not whitelisted) "srvr is not executed because
  it is not in the whitelist".
* Kafka's ApiVersions v0 request, which every Kafka broker (a sparklog broker agent too)
  answers with a frame carrying the request's correlation id. ZooKeeper reads it as a
  truncated connect request and closes the connection.

Only a positive answer decides: an address that is unreachable, silent, or closes without a
word may be a ZooKeeper server that is slow or at its connection limit, so the session keeps
waiting for it.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from enum import Enum

from sparklog.model.endpoints import parse_bootstrap_servers

__all__ = ["Service", "probe", "wrong_service"]

_TIMEOUT_S = 1.0
_MAX_ANSWER = 4096
_FOUR_LETTER_WORD = b"srvr"
_ZOOKEEPER_ANSWERS = (b"zookeeper", b"is not executed because it is not in the whitelist")  # lower case
_CORRELATION_ID = 0x53504B4C  # arbitrary; ZooKeeper's replies never start with it
_CLIENT_ID = b"sparklog-probe"
# Request header v1 (api key 18 = ApiVersions, version 0, correlation id, client id); v0 has no body.
_API_VERSIONS = struct.pack(">hhih", 18, 0, _CORRELATION_ID, len(_CLIENT_ID)) + _CLIENT_ID
_API_VERSIONS_FRAME = struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS
_MAX_KAFKA_FRAME = 1 << 20


class Service(Enum):
    ZOOKEEPER = "ZooKeeper"
    KAFKA = "a Kafka listener"
    OTHER = "another kind of server"
    UNKNOWN = "nothing that tells"


def _answer(host: str, port: int, request: bytes, complete: Callable[[bytes], bool]) -> bytes | None:
    """What the server at ``host:port`` sends back to ``request`` until ``complete`` holds, it
    closes the connection or the probe's time is up; None when no connection could be made."""
    deadline = time.monotonic() + _TIMEOUT_S
    try:
        sock = socket.create_connection((host, port), timeout=_TIMEOUT_S)
    except OSError:
        return None
    answer = b""
    with sock:
        try:
            sock.sendall(request)
            while not complete(answer) and len(answer) < _MAX_ANSWER and time.monotonic() < deadline:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                chunk = sock.recv(_MAX_ANSWER)
                if not chunk:
                    break
                answer += chunk
        except OSError:  # timed out or reset: what arrived so far is the answer
            pass
    return answer


def _is_kafka(answer: bytes) -> bool:
    if len(answer) < 8:
        return False
    size, correlation_id = struct.unpack(">ii", answer[:8])
    return correlation_id == _CORRELATION_ID and 0 < size <= _MAX_KAFKA_FRAME


def probe(host: str, port: int) -> Service:
    """Which kind of server answers at ``host:port`` (see the module docstring)."""
    words = _answer(host, port, _FOUR_LETTER_WORD, lambda answer: False)
    if words is None:
        return Service.UNKNOWN
    if any(marker in words.lower() for marker in _ZOOKEEPER_ANSWERS):
        return Service.ZOOKEEPER
    frame = _answer(host, port, _API_VERSIONS_FRAME, lambda answer: len(answer) >= 8)
    if frame is not None and _is_kafka(frame):
        return Service.KAFKA
    return Service.OTHER if words or frame else Service.UNKNOWN


def wrong_service(hosts: str) -> str | None:
    """Why ``hosts`` (a connect string's host list, no chroot) cannot be ZooKeeper, or None
    when it may be: no address is known to be ZooKeeper and at least one is a Kafka listener
    or another kind of server."""
    try:
        addresses = parse_bootstrap_servers(hosts)
    except ValueError:  # e.g. a host without a port: left to the ZooKeeper client to judge
        return None
    kinds = {f"{host}:{port}": probe(host, port) for host, port in addresses}
    if Service.ZOOKEEPER in kinds.values():
        return None
    kafka = [address for address, kind in kinds.items() if kind is Service.KAFKA]
    other = [address for address, kind in kinds.items() if kind is Service.OTHER]
    directions = (
        "sparklog finds a cluster through ZooKeeper (its --bootstrap-server is an alias of --zookeeper): give "
        "ZooKeeper's host:port with --zookeeper or zookeeper.connect (`sparklog zookeeper status` prints the "
        "embedded server's), or leave both out to use the embedded ZooKeeper"
    )
    if kafka:
        what = "is a Kafka listener" if len(kafka) == 1 else "are Kafka listeners"
        return f"{', '.join(kafka)} {what} (answering Kafka's ApiVersions request), not ZooKeeper. {directions}"
    if other:
        return f"{', '.join(other)} does not answer as ZooKeeper. {directions}"
    return None
