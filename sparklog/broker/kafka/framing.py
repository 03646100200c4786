"""Kafka's size-prefixed frames: a 4-byte big-endian length, then that many bytes.

A frame larger than ``socket.request.max.bytes`` or a connection closed inside a frame is a
:class:`FrameError`; the listener closes that connection only (Kafka does the same).
"""

from __future__ import annotations

import socket
import struct

from sparklog.errors import SparklogError

__all__ = ["FrameError", "read_frame", "write_frame"]

_SIZE = struct.Struct(">i")


class FrameError(SparklogError):
    """A client sent a frame the listener cannot read; the connection is closed."""


def _read_exactly(sock: socket.socket, size: int, peer: str) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            if remaining == size:
                return None
            raise FrameError(f"connection from {peer} closed after {size - remaining} of {size} bytes of a frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket, max_bytes: int, peer: str) -> bytes | None:
    """The next frame's payload, or None when the client closed the connection between frames."""
    header = _read_exactly(sock, _SIZE.size, peer)
    if header is None:
        return None
    (size,) = _SIZE.unpack(header)
    if size < 0 or size > max_bytes:
        raise FrameError(
            f"frame of {size} bytes from {peer} is outside 0..socket.request.max.bytes ({max_bytes}); "
            "closing the connection (is the client speaking the Kafka protocol?)"
        )
    payload = _read_exactly(sock, size, peer) if size else b""
    if payload is None:
        raise FrameError(f"connection from {peer} closed after a frame header announcing {size} bytes")
    return payload


def write_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_SIZE.pack(len(payload)) + payload)
