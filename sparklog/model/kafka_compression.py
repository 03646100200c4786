"""The compression codecs of Kafka record batches, one call per batch (cramjam, compiled).

Kafka's framings, as its clients write and read them:

* gzip: a gzip stream; zstd: a zstd frame;
* snappy: the Java client's xerial framing (a magic header, then blocks each prefixed by its
  big-endian length); librdkafka writes one plain snappy block, so both are read;
* lz4: the LZ4 frame format with independent blocks — Kafka's Java client refuses linked
  blocks, so batches are written with a frame built here from independent 64 KiB blocks
  (cramjam's own frame encoder links them).
"""

from __future__ import annotations

import struct

import cramjam

from sparklog.errors import SparklogError

__all__ = ["CompressionError", "deflate", "inflate"]

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, compatible with 1
_XERIAL_BLOCK_BYTES = 32 * 1024  # the block size of the xerial library Kafka's Java client uses
_BLOCK_LENGTH = struct.Struct(">i")
# LZ4 frame: magic, FLG (version 01, independent blocks, no checksums), BD (64 KiB blocks),
# and the header checksum of those two bytes (xxh32 >> 8), fixed because they are.
_LZ4_FRAME_HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"
_LZ4_BLOCK_BYTES = 64 * 1024
_LZ4_UNCOMPRESSED_BIT = 0x80000000
_LZ4_END_MARK = b"\x00\x00\x00\x00"
_LZ4_LENGTH = struct.Struct("<I")
_ZSTD_LEVEL = 3  # Kafka's default compression.zstd.level


class CompressionError(SparklogError):
    """A compressed batch payload that does not decompress."""


def inflate(codec: int, raw: bytes, start: int) -> bytes | memoryview | cramjam.Buffer:
    """The records of a batch whose payload ``raw[start:]`` is compressed with ``codec``."""
    payload = memoryview(raw)[start:]
    try:
        if codec == GZIP:
            return cramjam.gzip.decompress(payload)
        if codec == SNAPPY:
            return _snappy_decode(payload)
        if codec == LZ4:
            return cramjam.lz4.decompress(payload)
        if codec == ZSTD:
            return cramjam.zstd.decompress(payload)
    except (cramjam.DecompressionError, ValueError, OSError) as exc:
        raise CompressionError(f"the batch payload does not decompress with codec {codec}: {exc}") from exc
    raise CompressionError(f"unknown compression codec {codec}")


def deflate(codec: int, payload: bytes) -> bytes | cramjam.Buffer:
    """``payload`` compressed as Kafka's clients read a batch of ``codec``."""
    if codec == GZIP:
        return cramjam.gzip.compress(payload)
    if codec == SNAPPY:
        return _snappy_encode(payload)
    if codec == LZ4:
        return _lz4_encode(payload)
    if codec == ZSTD:
        return cramjam.zstd.compress(payload, level=_ZSTD_LEVEL)
    raise CompressionError(f"unknown compression codec {codec}")


def _snappy_decode(payload: memoryview) -> bytes | cramjam.Buffer:
    if bytes(payload[: len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        return cramjam.snappy.decompress_raw(payload)
    blocks = []
    position = len(_XERIAL_HEADER)
    while position < len(payload):
        if len(payload) - position < _BLOCK_LENGTH.size:
            raise CompressionError("a xerial snappy block length is cut short")
        (length,) = _BLOCK_LENGTH.unpack_from(payload, position)
        position += _BLOCK_LENGTH.size
        if length < 0 or length > len(payload) - position:
            raise CompressionError(f"a xerial snappy block of {length} bytes overruns the payload")
        blocks.append(bytes(cramjam.snappy.decompress_raw(payload[position : position + length])))
        position += length
    return b"".join(blocks)


def _snappy_encode(payload: bytes) -> bytes:
    view = memoryview(payload)
    out = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_BYTES]))
        out += [_BLOCK_LENGTH.pack(len(block)), block]
    return b"".join(out)


def _lz4_encode(payload: bytes) -> bytes:
    view = memoryview(payload)
    out = [_LZ4_FRAME_HEADER]
    for start in range(0, len(view), _LZ4_BLOCK_BYTES):
        chunk = view[start : start + _LZ4_BLOCK_BYTES]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):  # incompressible: the frame stores the block as it is
            out += [_LZ4_LENGTH.pack(len(chunk) | _LZ4_UNCOMPRESSED_BIT), bytes(chunk)]
        else:
            out += [_LZ4_LENGTH.pack(len(block)), block]
    out.append(_LZ4_END_MARK)
    return b"".join(out)
