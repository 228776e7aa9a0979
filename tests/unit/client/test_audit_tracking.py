"""The producers' per-record header work without a broker: the origin headers stamped once per
millisecond, and records counted per batch in runs (one counter while records go to the same batch
and window), from several threads, with batches settling meanwhile; a headers tuple given to many
sends converted once."""

from __future__ import annotations

import asyncio
import random
import threading
import types
from collections import Counter

import pytest

from headwater.client.audit import HEADER_CREATED, HEADER_DC, HEADER_HOST, AuditingProducer
from headwater.client.producer import Producer
from headwater.client.record_future import BatchOutcome
from headwater.protocol.errors import ErrorCode, KafkaError

WINDOW_MS = 1000


def auditing(max_request_size: int = 1_000_000) -> AuditingProducer:
    # only stamp/track are exercised: the wrapped producer is read for max_request_size alone
    fake = types.SimpleNamespace(max_request_size=max_request_size)
    return AuditingProducer(producer=fake, window_ms=WINDOW_MS, datacenter="dc1", host="h1")  # type: ignore[arg-type]


def test_origin_headers_are_built_once_per_millisecond_and_topic() -> None:
    a = auditing()
    h1, ts1, size1, w1 = a.stamp("t", (), 5_500, 100, True)
    h2, _, size2, w2 = a.stamp("t", (), 5_500, 100, True)
    assert h1 == ((HEADER_HOST, b"h1"), (HEADER_DC, b"dc1"), (HEADER_CREATED, b"5500"))
    assert h2 is h1 and w2 is w1 and size2 == size1 > 100 and ts1 == 5_500
    h3, _, _, w3 = a.stamp("t", (), 5_501, 100, True)  # next millisecond, same window: same key object
    assert h3[2] == (HEADER_CREATED, b"5501") and w3 is w1 == ("t", 5)
    _, _, _, w4 = a.stamp("u", (), 5_501, 100, True)
    assert w4 == ("u", 5)
    _, _, _, w5 = a.stamp("t", (), 6_000, 100, True)
    assert w5 == ("t", 6)
    # the caller's headers come first; a record already stamped keeps its origin and window
    h6, _, size6, w6 = a.stamp("t", (("trace", b"x"),), 6_000, 110, True)
    assert h6 == (("trace", b"x"), *a.stamp("t", (), 6_000, 0, True)[0]) and size6 == size1 + 10
    assert w6 == ("t", 6)
    mirrored = (("trace", b"x"), (HEADER_CREATED, b"3999"))
    h7, ts7, size7, w7 = a.stamp("t", mirrored, 6_000, 120, True)
    assert (h7, ts7, size7, w7) == (mirrored, 3_999, 120, ("t", 3))
    assert a.stamp("t", mirrored, 6_000, 120, False)[1] == 6_000  # an explicit timestamp stays


def test_a_record_too_large_with_its_origin_headers_is_refused() -> None:
    a = auditing(max_request_size=250)  # 189 bytes a record; the origin headers add 52
    a.stamp("t", (), 1, 100, True)
    for hdrs in ((), (("trace", b"x"),)):
        with pytest.raises(KafkaError) as e:
            a.stamp("t", hdrs, 1, 150, True)
        assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_counts_from_threads_match_what_each_batch_acknowledged() -> None:
    """4 threads track records into 12 batches over 3 windows (window keys as stamp() shares them, and
    equal keys that are other objects) while batches settle, some failing, some before their last
    records are tracked: the counts are exactly the records of the acknowledged batches."""
    loop = asyncio.new_event_loop()
    try:
        a = auditing()
        rng = random.Random(24)
        batches = [BatchOutcome(loop, "t", 0) for _ in range(12)]
        fails = set(rng.sample(range(12), 4))
        shared = [a.stamp("t", (), w * WINDOW_MS, 0, True)[3] for w in range(3)]
        plans = []
        for _ in range(4):
            plan = []
            for _ in range(3000):
                b = rng.randrange(12)
                w = (b + rng.randrange(2)) % 3  # mostly runs of a batch and window, some switching
                key = shared[w] if rng.random() < 0.9 else ("t", w)
                plan.append((b, key))
            plan.sort(key=lambda e: e[0])  # batches fill in order, as an accumulator's do
            plans.append(plan)
        expected: Counter[tuple[str, int]] = Counter()
        for plan in plans:
            for b, key in plan:
                if b not in fails:
                    expected[key] += 1

        def send(plan: list[tuple[int, tuple[str, int]]]) -> None:
            for b, key in plan:
                a.track(batches[b], key)

        def settle() -> None:
            for i in rng.sample(range(12), 12):
                if i in fails:
                    batches[i].failed(KafkaError(ErrorCode.NOT_LEADER_FOR_PARTITION, "test"))
                else:
                    batches[i].succeeded(0, 1, [])

        threads = [threading.Thread(target=send, args=(p,)) for p in plans]
        for t in threads:
            t.start()
        settle()  # meanwhile: some batches settle before all their records are tracked
        for t in threads:
            t.join(120)
            assert not t.is_alive()
        assert a.counts() == dict(expected)
        assert not a._tallies  # every batch settled: nothing left in flight
    finally:
        loop.close()


def test_a_window_counted_in_a_run_is_in_flight_until_its_batch_settles() -> None:
    loop = asyncio.new_event_loop()
    try:
        a = auditing()
        batch = BatchOutcome(loop, "t", 0)
        key = a.stamp("t", (), 7_000, 0, True)[3]
        for _ in range(5):
            a.track(batch, key)
        assert a.counts() == {}
        assert key in {k for tally in a._tallies.values() for k in tally}  # what publish() holds back
        batch.succeeded(0, 1, [])
        assert a.counts() == {("t", 7): 5}
    finally:
        loop.close()


def test_one_headers_tuple_is_converted_once_and_mutable_headers_every_time() -> None:
    p = Producer("127.0.0.1:1")  # not started: prepare() only serializes
    fixed = (("origin.host", b"h1"), ("origin.created", b"1700000000000"), ("empty", None))
    first = p.prepare(b"v", None, fixed, 1)
    again = p.prepare(b"v", None, fixed, 2)
    assert first[2] == again[2] == fixed and again[2] is fixed and first[4] == again[4]
    # a tuple holding something mutable is converted at each send: what it holds then is sent
    value = bytearray(b"a")
    mutable = (("k", value),)
    assert p.prepare(b"v", None, mutable, 1)[2] == (("k", b"a"),)
    value.extend(b"bc")
    got = p.prepare(b"v", None, mutable, 1)
    sized = sum(len(k) + len(v or b"") + 4 for k, v in fixed)
    assert got[2] == (("k", b"abc"),) and got[4] == first[4] - sized + len("k") + len(b"abc") + 4
    assert p.prepare(b"v", None, [("k", "text")], 1)[2] == (("k", b"text"),)
