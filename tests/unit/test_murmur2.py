"""Kafka's default partitioner: murmur2 test vectors, the vectorised form, the partition rule."""

from __future__ import annotations

import random

import pytest

from sparklog.model.records import murmur2, partition_for_key, partitions_for_keys, to_positive

# Kafka's UtilsTest.testMurmur2.
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def java_murmur2(data: bytes) -> int:
    """A line-by-line transliteration of Kafka's ``Utils.murmur2`` with Java int semantics
    (signed bytes masked with ``& 0xff``, ``>>>`` as an unsigned shift), independent of the
    implementation under test."""
    length = len(data)
    seed, m, r = _int32(0x9747B28C), 0x5BD1E995, 24
    h = _int32(seed ^ length)
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = (
            (data[i4] & 0xFF)
            + ((data[i4 + 1] & 0xFF) << 8)
            + ((data[i4 + 2] & 0xFF) << 16)
            + ((data[i4 + 3] & 0xFF) << 24)
        )
        k = _int32(k * m)
        k = _int32(k ^ ((k & 0xFFFFFFFF) >> r))
        k = _int32(k * m)
        h = _int32(h * m)
        h = _int32(h ^ k)
    rest = length % 4
    if rest == 3:
        h = _int32(h ^ ((data[(length & ~3) + 2] & 0xFF) << 16))
    if rest >= 2:
        h = _int32(h ^ ((data[(length & ~3) + 1] & 0xFF) << 8))
    if rest >= 1:
        h = _int32(h ^ (data[length & ~3] & 0xFF))
        h = _int32(h * m)
    h = _int32(h ^ ((h & 0xFFFFFFFF) >> 13))
    h = _int32(h * m)
    h = _int32(h ^ ((h & 0xFFFFFFFF) >> 15))
    return h


def random_keys(n: int, seed: int, max_len: int = 40) -> list[bytes]:
    rng = random.Random(seed)
    keys = [rng.randbytes(rng.randrange(max_len + 1)) for _ in range(n)]
    return [*keys, b"", b"\x00", b"\xff", b"\xff\xff\xff", b"\x80\x00\x00\x00\x80"]


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS, ids=[k.decode()[:12] for k, _ in KAFKA_VECTORS])
def test_kafka_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected
    assert java_murmur2(key) == expected  # the reference is right too


def test_matches_java_reference_on_random_bytes() -> None:
    for key in random_keys(2000, seed=1):
        assert murmur2(key) == java_murmur2(key), f"murmur2({key!r})"


def test_result_is_a_signed_32_bit_int() -> None:
    results = [murmur2(k) for k in random_keys(500, seed=2)]
    assert all(-(1 << 31) <= r < (1 << 31) for r in results)
    assert any(r < 0 for r in results) and any(r >= 0 for r in results)


@pytest.mark.parametrize("num_partitions", [1, 3, 7, 64, 1000])
def test_partition_is_to_positive_murmur2_mod_n(num_partitions: int) -> None:
    for key in random_keys(300, seed=num_partitions):
        expected = (java_murmur2(key) & 0x7FFFFFFF) % num_partitions
        assert partition_for_key(key, num_partitions) == expected, f"key {key!r}"
    assert to_positive(-1) == 0x7FFFFFFF and to_positive(-(1 << 31)) == 0


@pytest.mark.parametrize("num_partitions", [1, 2, 5, 12])
def test_vectorised_equals_scalar(num_partitions: int) -> None:
    keys = random_keys(3000, seed=10 + num_partitions)
    vectorised = partitions_for_keys(keys, num_partitions).tolist()
    scalar = [partition_for_key(k, num_partitions) for k in keys]
    mismatches = [(k, v, s) for k, v, s in zip(keys, vectorised, scalar, strict=False) if v != s]
    assert not mismatches, f"{len(mismatches)} keys differ, first {mismatches[0]} (key, vectorised, scalar)"


@pytest.mark.parametrize("keys", [[b""], [b"", b""], [b"", b"abcd", b""], [b"abcd"], []])
def test_vectorised_edge_shapes(keys: list[bytes]) -> None:
    assert partitions_for_keys(keys, 7).tolist() == [partition_for_key(k, 7) for k in keys]


def test_vectorised_kafka_vectors() -> None:
    keys = [k for k, _ in KAFKA_VECTORS]
    n = 1 << 31  # modulo 2^31 leaves toPositive(murmur2) itself
    assert partitions_for_keys(keys, n).tolist() == [v & 0x7FFFFFFF for _, v in KAFKA_VECTORS]
