"""The default partitioner: Java's murmur2, toPositive, sticky partitions for null keys."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.client.partitioner import DefaultPartitioner, RoundRobinPartitioner, murmur2, to_positive

try:  # kafka-python's murmur2: the reference implementation (a dev dependency)
    from kafka.partitioner.default import murmur2 as reference_murmur2
except ImportError:  # pragma: no cover
    reference_murmur2 = None

# org.apache.kafka.common.utils.UtilsTest#testMurmur2 (Java's signed ints).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), JAVA_MURMUR2.items())
def test_murmur2_matches_java(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_murmur2_edge_lengths() -> None:
    assert murmur2(b"") == 275646681  # seed ^ 0, mixed
    assert -(2**31) <= murmur2(b"\xff" * 7) < 2**31
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == murmur2(b"foobar")


@pytest.mark.skipif(reference_murmur2 is None, reason="kafka-python is not installed")
@settings(deadline=None)
@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(data: bytes) -> None:
    assert reference_murmur2 is not None
    assert murmur2(data) & 0xFFFFFFFF == reference_murmur2(data)


def test_to_positive_is_a_mask_not_abs() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


def test_keyed_partition_is_java_formula() -> None:
    p = DefaultPartitioner()
    parts = list(range(12))
    for key, h in JAVA_MURMUR2.items():
        assert p.partition("t", key, parts, parts) == to_positive(h) % 12
    # keys ignore availability: the same key always lands on the same partition
    assert p.partition("t", b"foobar", parts, [0]) == to_positive(-790332482) % 12
    # fixed placements (the Java client's, and librdkafka's murmur2_random) for 7 partitions
    keys = (b"21", b"foobar", b"abc", b"key-1", b"key-2", b"key-3")
    assert [p.partition("t", k, list(range(7)), []) for k in keys] == [3, 0, 4, 5, 4, 4]


def test_null_keys_stick_until_a_new_batch() -> None:
    p = DefaultPartitioner(random.Random(7))
    parts = [0, 1, 2, 3]
    first = p.partition("t", None, parts, parts)
    assert all(p.partition("t", None, parts, parts) == first for _ in range(50))
    p.on_new_batch("t", first)
    second = p.partition("t", None, parts, parts)
    assert second != first
    p.on_new_batch("t", first)  # a batch of another partition closed: no change
    assert p.partition("t", None, parts, parts) == second
    # topics are independent
    other = p.partition("u", None, parts, parts)
    assert other in parts


def test_null_keys_prefer_available_partitions() -> None:
    p = DefaultPartitioner(random.Random(1))
    for _ in range(20):
        p.on_new_batch("t", p.partition("t", None, [0, 1, 2], [2]))
        assert p.partition("t", None, [0, 1, 2], [2]) == 2
    # nothing available: any partition
    assert p.partition("v", None, [0, 1, 2], []) in (0, 1, 2)


def test_sticky_moves_to_the_only_other_partition() -> None:
    p = DefaultPartitioner()
    a = p.partition("t", None, [0, 1], [0, 1])
    p.on_new_batch("t", a)
    assert p.partition("t", None, [0, 1], [0, 1]) == 1 - a


def test_no_partitions_is_an_error() -> None:
    with pytest.raises(ValueError):
        DefaultPartitioner().partition("t", b"k", [], [])


def test_round_robin() -> None:
    p = RoundRobinPartitioner()
    assert [p.partition("t", b"k", [0, 1, 2], []) for _ in range(5)] == [0, 1, 2, 0, 1]
