"""The producers' per-record header work without a broker: the origin headers stamped once per
millisecond, and records counted per batch by the producer's batch counter (no work per record), from
several threads, with batches settling meanwhile; a headers tuple given to many sends converted once."""

from __future__ import annotations

import asyncio
import random
import threading
import types
from collections import Counter
from typing import Any

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
    assert h2 is h1 and w2 == w1 and size2 == size1 > 100 and ts1 == 5_500
    h3, _, _, w3 = a.stamp("t", (), 5_501, 100, True)  # next millisecond, same window
    assert h3[2] == (HEADER_CREATED, b"5501") and w3 == w1 == ("t", 5)
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


def test_batches_are_counted_by_their_records_timestamps_with_moves_to_their_own_created_windows() -> None:
    """The producer's batch counter: 4 threads open 40 batches over 3 windows, some records moved to
    an earlier window (their own origin.created), while batches settle, some failing, some straddling a
    window's end: the counts are exactly the records of the acknowledged batches, by window."""
    loop = asyncio.new_event_loop()
    try:
        a = auditing()
        rng = random.Random(24)
        expected: Counter[tuple[str, int]] = Counter()
        lock = threading.Lock()

        def batches(seed: int) -> None:
            r = random.Random(seed)
            for _ in range(10):
                outcome = BatchOutcome(loop, "t", 0)
                start = r.randrange(3 * WINDOW_MS - 50)
                timestamps = sorted(start + r.randrange(50) for _ in range(r.randrange(1, 200)))
                assert a.opened("t", outcome, timestamps[0])
                moved: Counter[tuple[str, int]] = Counter()
                for ts in timestamps[:5]:
                    if r.random() < 0.5:  # came with an origin.created of window 0
                        a.moved(lambda o, i: (o, i), ts, ("t", 0))(outcome, 0)
                        moved[("t", ts // WINDOW_MS)] -= 1
                        moved[("t", 0)] += 1
                if r.random() < 0.3:
                    a.failed(outcome)
                    continue
                a.acknowledged("t", outcome, timestamps)
                with lock:
                    expected.update(Counter(("t", ts // WINDOW_MS) for ts in timestamps))
                    expected.update(moved)

        threads = [threading.Thread(target=batches, args=(rng.random(),)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
            assert not t.is_alive()
        assert a.counts() == {k: n for k, n in expected.items() if n}
        assert not a._open and not a._corrections  # every batch settled: nothing left in flight
        assert not a.opened("__audit", BatchOutcome(loop, "__audit", 0), 0)  # the events are not counted
    finally:
        loop.close()


def test_a_window_is_held_back_while_a_batch_opened_in_it_is_in_flight() -> None:
    async def scenario() -> None:
        a = auditing()
        sent: list[bytes] = []

        async def send(topic: str, value: bytes, key: Any = None, headers: Any = ()) -> Any:
            sent.append(value)
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(None)
            return fut

        a.producer.send = send  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        done, open_ = BatchOutcome(loop, "t", 0), BatchOutcome(loop, "t", 0)
        a.opened("t", done, 7_000)
        a.opened("t", open_, 7_900)
        a.acknowledged("t", done, [7_000] * 5)
        assert a.counts() == {("t", 7): 5}
        assert await a.publish() == 0  # window 7 (long over) waits for the batch still in flight
        a.acknowledged("t", open_, [7_900, 8_100])
        assert await a.publish() == 2 and a.counts() == {("t", 7): 6, ("t", 8): 1}
        assert len(sent) == 2

    asyncio.run(scenario())


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
