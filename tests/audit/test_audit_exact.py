"""Exact audit counts under faults (review audit-2026-11-24): store faults, bad events, batches that
straddle windows or mix datacenters, retried count events, a second writer, offset resets, webhook
failures, watermarks, the mirror's gap events and the HTTP side. Fakes for the brokers (a fake
``fetch_raw``); the store is real SQLite."""

from __future__ import annotations

import asyncio
import html
import json
import logging
import sqlite3
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestClient, TestServer

from headwater.audit import counter as counter_mod
from headwater.audit.config import parse
from headwater.audit.counter import TierCounter, count_batch
from headwater.audit.reconcile import reconcile
from headwater.audit.service import AuditService
from headwater.audit.store import (
    MIGRATIONS,
    CountRow,
    Migration,
    OffsetConflict,
    SchemaTooNew,
    Store,
    StoreUnavailable,
)
from headwater.client.audit import AUDIT_TOPIC
from headwater.client.errors import OffsetOutOfRangeError
from headwater.client.raw import RawPartition
from headwater.protocol.records.header import read_header
from headwater.protocol.records.record import RecordInput, decode_batch, encode_batch

W = 60_000
NOW = int(time.time() * 1000) // W * W


def _config(tmp_path: Path, **extra: str) -> Any:
    props = {
        "clusters": "dc1, agg",
        "dc1.bootstrap.servers": "127.0.0.1:1",
        "agg.bootstrap.servers": "127.0.0.1:1",
        "window.ms": str(W),
        "grace.ms": "1000",
        "store": f"sqlite:///{tmp_path / 'audit.db'}",
        "http.host": "127.0.0.1",
        "http.port": "0",
        **extra,
    }
    if "agg" not in props["clusters"]:
        del props["agg.bootstrap.servers"]
    return parse(props)


def _rec(created: int, dc: str = "dc1", value: bytes = b"v") -> RecordInput:
    headers = [("origin.dc", dc.encode()), ("origin.created", str(created).encode())]
    return RecordInput(b"k", value, created, headers)


def _batch(records: list[RecordInput], base_offset: int = 0) -> tuple[Any, memoryview]:
    b = encode_batch(records, base_offset=base_offset)
    return read_header(b), memoryview(b)


def _event(window_start: int, count: int, guid: str, **extra: Any) -> bytes:
    e = {"guid": guid, "tier": "producer", "datacenter": "dc1", "host": "h", "application": "a", "topic": "t"}
    e.update(window_start=window_start, window_end=window_start + W, count=count, **extra)
    return json.dumps(e).encode()


class FakeFetch:
    """fetch_raw over in-memory partitions: {tp: [(header, batch)]}, answered from the requested offset."""

    def __init__(self, logs: dict[tuple[str, int], list[tuple[Any, memoryview]]]) -> None:
        self.logs = logs
        self.out_of_range: tuple[str, int, int] | None = None

    def end(self, tp: tuple[str, int]) -> int:
        return self.logs[tp][-1][0].next_offset if self.logs[tp] else 0

    async def __call__(self, cluster: Any, requests: Any, **kw: Any) -> Any:
        if self.out_of_range is not None:
            raise OffsetOutOfRangeError(*self.out_of_range)
        got = {}
        for t, p, o in requests:
            batches = [(h, b) for h, b in self.logs.get((t, p), []) if h.next_offset > o]
            got[(t, p)] = RawPartition(batches, self.end((t, p)), 0)
        return got, {}


class FakeAdmin:
    cluster = None

    async def close(self) -> None:
        pass


def _counter(config: Any, store: Store, alias: str = "dc1", **kw: Any) -> TierCounter:
    c = TierCounter(alias, "127.0.0.1:1", config, store, admin=FakeAdmin(), **kw)  # type: ignore[arg-type]
    c._topics_at = time.monotonic() + 3600  # no discovery: the test sets the partitions
    return c


@pytest.fixture
def fetch(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeFetch]:
    f = FakeFetch({})
    monkeypatch.setattr(counter_mod, "fetch_raw", f)
    yield f


def _counts(store: Store) -> dict[tuple[int, str, str], int]:
    return {(r.window_start, r.datacenter, r.tier): r.count for r in store.counts()}


# -- 3: every record in its own window and datacenter ---------------------------------------------


def test_count_batch_equals_record_by_record_for_straddling_and_mixed_dc_batches() -> None:
    batches = [
        [_rec(60000), _rec(59999)],  # first record's timestamp is not the batch's minimum
        [_rec(1000, "dc1"), _rec(1001, "dc2")],  # a re-producer keeping origin headers: two DCs, one window
        [_rec(W - 1), _rec(W), _rec(W - 2, "dc2")],
    ]
    for records in batches:
        h, b = _batch(records)
        got: dict[Any, list[int]] = defaultdict(lambda: [0, 0])
        count_batch("agg", "t", W, h, b, got)
        want: dict[Any, list[int]] = defaultdict(lambda: [0, 0])
        for r in decode_batch(b)[1]:
            headers = dict(r.headers)
            want[("t", int(headers["origin.created"]) // W * W, headers["origin.dc"].decode(), "agg")][0] += 1
        assert dict(got) == dict(want), records


def test_records_with_timestamps_or_creation_times_out_of_range_are_counted_as_unaudited(
    tmp_path: Path, fetch: FakeFetch
) -> None:
    store = Store(_config(tmp_path).store)
    c = _counter(_config(tmp_path), store)
    records = [
        RecordInput(b"k", b"v", -(2**63), []),  # its window would not fit a BIGINT
        RecordInput(b"k", b"v", NOW, [("origin.dc", b"dc1"), ("origin.created", str(2**63).encode())]),
    ]
    fetch.logs[("t", 0)] = [_batch(records[:1]), _batch(records[1:], base_offset=1)]
    c.offsets = {("t", 0): 0}
    asyncio.run(c._round())
    assert _counts(store) == {(-W, "-", "dc1"): 1, (NOW, "-", "dc1"): 1}
    assert store.offsets("dc1") == {("t", 0): 2}


def test_a_corrupt_batch_stops_the_tier_loudly_with_nothing_counted(tmp_path: Path, fetch: FakeFetch) -> None:
    from headwater.service.supervisor import FatalError

    store = Store(_config(tmp_path).store)
    c = _counter(_config(tmp_path), store)
    h, b = _batch([_rec(NOW + i) for i in range(5)])
    broken = bytearray(b)
    broken[-1] ^= 0xFF  # fails its CRC-32C
    fetch.logs[("t", 0)] = [(h, memoryview(bytes(broken)))]
    c.offsets = {("t", 0): 0}
    with pytest.raises(FatalError, match=r"t-0: the record batch at offset 0 is corrupt .* stops counting at offset 0"):
        asyncio.run(c._round())
    assert _counts(store) == {} and store.offsets("dc1") == {}


# -- 2: bad events are dead-lettered, the offset moves on -----------------------------------------


def test_bad_events_are_rejected_kept_counted_and_skipped(tmp_path: Path, fetch: FakeFetch) -> None:
    config = _config(tmp_path)
    service = AuditService(config)  # its headwater_audit_bad_events_total
    store = service.store
    bad: list[tuple[str, str]] = []

    def on_bad(tier: str, reason: str) -> None:
        bad.append((tier, reason))
        service._count_bad(tier, reason)

    c = _counter(config, store, on_bad_event=on_bad)
    values = [
        b"not json",
        b"[" * 200000,  # RecursionError in json
        _event(2**63, 1, "g-big-window"),
        _event(0, 2**63, "g-big-count"),
        _event(0, -1, "g-negative"),
        _event(1, 1, "g-off-grid"),
        json.dumps(
            {
                "guid": "g-len",
                "tier": "producer",
                "datacenter": "dc1",
                "topic": "t",
                "window_start": 0,
                "window_end": 2 * W,
                "count": 1,
            }
        ).encode(),
        _event(W, 5, "g-good"),
    ]
    records = [RecordInput(b"t", v, NOW, []) for v in values]
    fetch.logs[(AUDIT_TOPIC, 0)] = [_batch(records)]
    c.offsets = {(AUDIT_TOPIC, 0): 0}
    asyncio.run(c._round())
    assert store.offsets("dc1") == {(AUDIT_TOPIC, 0): len(values)}  # the offset moved past them
    assert _counts(store) == {(W, "dc1", "producer"): 5}
    reasons = [r[4] for r in sorted(store.rejected(), key=lambda r: r[3])]
    assert reasons == [
        "unparsable",
        "unparsable",
        "timestamp out of range",
        "count out of range",
        "count out of range",
        "window not on grid",
        "window length",
    ]
    assert [r[3] for r in sorted(store.rejected(), key=lambda r: r[3])] == list(range(7))
    assert bad == [("dc1", r) for r in reasons]
    assert store.stat("rejected_events") == 7
    asyncio.run(c._round())  # nothing more to read: nothing rejected twice
    assert len(bad) == 7
    metric = "headwater_audit_bad_events_total"
    assert service.registry.get_sample_value(metric, {"tier": "dc1", "reason": "unparsable"}) == 2
    assert service.registry.get_sample_value(metric, {"tier": "dc1", "reason": "count out of range"}) == 2


# -- 1: store faults are retried; the store reconnects; /healthz tells ------------------------------


def test_a_locked_sqlite_store_is_retried_and_the_round_commits_once(tmp_path: Path, fetch: FakeFetch) -> None:
    config = _config(tmp_path)
    store = Store(config.store, busy_timeout_s=0.1)
    c = _counter(config, store, store_retries=20)
    h, b = _batch([_rec(NOW + i) for i in range(10)])
    fetch.logs[("t", 0)] = [(h, b)]
    c.offsets = {("t", 0): 0}
    locker = sqlite3.connect(tmp_path / "audit.db", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")

    async def scenario() -> None:
        task = asyncio.ensure_future(c._round())
        for _ in range(200):
            if c.store_error:
                break
            await asyncio.sleep(0.05)
        assert "locked" in c.store_error
        assert not task.done()
        locker.execute("ROLLBACK")
        await asyncio.wait_for(task, 60)

    asyncio.run(scenario())
    assert c.store_error == ""
    assert _counts(store) == {(NOW, "dc1", "dc1"): 10}
    assert store.offsets("dc1") == {("t", 0): h.next_offset}


def test_a_counter_that_fails_is_restarted_counted_and_reported_by_healthz(tmp_path: Path) -> None:
    config = _config(tmp_path)
    service = AuditService(config)
    failing = True
    failures = []

    async def round_() -> None:  # what a store error past its retries does to a counting round
        if failing:
            failures.append(1)
            raise sqlite3.OperationalError("database is locked")
        await asyncio.sleep(0.01)

    async def discover() -> None:
        dc1.offsets.setdefault(("t", 0), 0)

    dc1 = service.counters[0]
    dc1._round = round_  # type: ignore[method-assign]
    dc1._discover = discover  # type: ignore[method-assign]

    async def wait_health(want: bool) -> str:
        deadline = time.monotonic() + 60  # a deadline in time, not in polls: a loaded machine polls slowly
        while True:
            ok, text = service.health()
            if ok == want:
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"health never {want}: {text}")
            await asyncio.sleep(0.01)

    async def scenario() -> None:
        nonlocal failing
        service.supervisor.min_backoff_s = 0.05
        service.supervisor.max_backoff_s = 0.2  # the backoff doubles per failure: keep the restart prompt
        service.supervisor.start("counter dc1", dc1.run, labels={"tier": "dc1"})
        text = await wait_health(False)
        assert "counter dc1: restarting: OperationalError: database is locked" in text
        async with TestClient(TestServer(_app(service))) as client:
            # between a restart and its next failure the counter is briefly running: ask until the
            # endpoint says what health() said (the server's start may take that long under load)
            deadline = time.monotonic() + 60
            while True:
                r = await client.get("/healthz")
                body = await r.text()
                if r.status == 503 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.01)
            assert r.status == 503 and "database is locked" in body, (r.status, body)
            failing = False
            text = await wait_health(True)
            assert "dc1: running, counted offset 0, lag 0" in text
            r = await client.get("/healthz")
            assert r.status == 200 and "dc1: running" in await r.text()
        dc1.store_error = "OperationalError: connection refused"  # a counter retrying its store call
        ok, text = service.health()
        assert not ok and "counter dc1: store unavailable: OperationalError: connection refused" in text
        await service.supervisor.stop_all()

    asyncio.run(scenario())
    assert failures
    assert service.registry.get_sample_value("headwater_audit_task_failures_total", {"tier": "dc1"}) == len(failures)
    service.store.close()


def test_store_reconnects_after_a_connection_fault(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    store.apply("dc1", {("t", 0): 1}, {}, 0, 0, previous={})
    store._conn.close()  # what a server restart does to a client connection, as far as the client sees
    store._conn = _Broken(store._conn)
    with pytest.raises(StoreUnavailable):
        store.offsets("dc1")
    assert store.offsets("dc1") == {("t", 0): 1}  # a new connection


class _Broken:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def cursor(self) -> Any:
        raise sqlite3.OperationalError("server closed the connection unexpectedly")

    def close(self) -> None:
        pass


# -- 5, 7: idempotent counting ---------------------------------------------------------------------


def test_a_second_writer_or_a_retried_commit_never_counts_twice(tmp_path: Path, fetch: FakeFetch) -> None:
    config = _config(tmp_path)
    store = Store(config.store)
    h, b = _batch([_rec(NOW + i) for i in range(7)])
    fetch.logs[("t", 0)] = [(h, b)]
    one, two = _counter(config, store), _counter(config, Store(config.store))
    one.offsets = {("t", 0): 0}
    two.offsets = {("t", 0): 0}
    asyncio.run(one._round())
    asyncio.run(two._round())  # the second instance read the same records: its round is dropped
    assert _counts(store) == {(NOW, "dc1", "dc1"): 7}
    assert two.offsets == {("t", 0): h.next_offset}  # and it follows the stored offsets
    # A commit retried after it was in fact done (its answer lost) adds nothing.
    counts = {("t", NOW, "dc1", "dc1"): (3, 0)}
    assert store.apply("dc1", {("t", 0): 10}, counts, 0, 0, previous={("t", 0): 7}) == 0
    assert store.apply("dc1", {("t", 0): 10}, counts, 0, 0, previous={("t", 0): 7}) == 0
    assert _counts(store) == {(NOW, "dc1", "dc1"): 10}
    with pytest.raises(OffsetConflict):
        store.apply("dc1", {("t", 0): 12}, counts, 0, 0, previous={("t", 0): 7})
    assert _counts(store) == {(NOW, "dc1", "dc1"): 10}


class FakeConsumer:
    earliest = 0
    latest = 0

    def __init__(self, *a: Any, **kw: Any) -> None:
        pass

    async def earliest_offset(self, t: str, p: int) -> int:
        return self.earliest

    async def latest_offset(self, t: str, p: int) -> int:
        return self.latest


def test_offset_out_of_range_resumes_at_the_log_end_not_the_earliest(
    tmp_path: Path, fetch: FakeFetch, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = _config(tmp_path)
    store = Store(config.store)
    c = _counter(config, store)
    store.apply("dc1", {("t", 0): 500}, {}, 0, 0, previous={})
    c.offsets = {("t", 0): 500}
    c.stored = {("t", 0): 500}
    fetch.logs[("t", 0)] = [_batch([_rec(NOW + i) for i in range(100)])]
    monkeypatch.setattr(counter_mod, "Consumer", FakeConsumer)
    FakeConsumer.earliest, FakeConsumer.latest = 0, 100  # truncated (or re-created) below our offset
    fetch.out_of_range = ("t", 0, 500)
    with caplog.at_level(logging.WARNING):
        asyncio.run(c._round())
    assert store.offsets("dc1") == {("t", 0): 100}
    assert "counting resumes at the log end" in caplog.text
    fetch.out_of_range = None
    asyncio.run(c._round())
    assert _counts(store) == {}  # the 100 retained records were not counted again
    # Below the log start (retention outran the audit): resume at the log start, loudly.
    FakeConsumer.earliest, FakeConsumer.latest = 150, 180
    fetch.out_of_range = ("t", 0, 100)
    with caplog.at_level(logging.ERROR):
        asyncio.run(c._round())
    assert store.offsets("dc1") == {("t", 0): 150}
    assert "offsets 100-149 were deleted before they were counted" in caplog.text


# -- 6: alerts are delivered ----------------------------------------------------------------------


async def _webhook(statuses: list[int]) -> tuple[TestServer, list[dict[str, Any]]]:
    got: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        got.append(await request.json())
        return web.Response(status=statuses.pop(0) if statuses else 200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server, got


def _loss_rows(store: Store, window: int, tier_count: int) -> None:
    store.apply(
        "x", {}, {("t", window, "dc1", "producer"): (10, 0), ("t", window, "dc1", "dc1"): (tier_count, 0)}, 0, 0
    )


def test_an_alert_is_retried_until_2xx_and_never_sent_twice(tmp_path: Path) -> None:
    async def scenario() -> None:
        server, got = await _webhook([500])
        config = _config(tmp_path, clusters="dc1", **{"alert.webhook.url": str(server.make_url("/hook"))})
        service = AuditService(config)
        c = service.counters[0]
        past = NOW - 10 * W
        _loss_rows(service.store, past, 7)
        c.watermarks = {("t", 0): NOW, (AUDIT_TOPIC, 0): NOW}
        c._topics_at = 1.0
        assert await service.check() == 1
        assert await service.check() == 0  # recorded once
        async with ClientSession() as http:
            assert await service.deliver(http) == 0  # 500: still pending
            assert len(got) == 1
            for _ in range(100):  # the first retry is due after 1 s
                if await service.deliver(http):
                    break
                await asyncio.sleep(0.1)
            assert len(got) == 2 and got[1] == got[0]
            assert got[0]["alert"] == "loss" and got[0]["missing"] == 3
            assert await service.deliver(http) == 0
            await asyncio.sleep(1.2)
            assert await service.deliver(http) == 0
        assert len(got) == 2
        await server.close()
        service.store.close()

    asyncio.run(scenario())


def test_alerts_are_sent_concurrently_with_a_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("headwater.audit.service.ALERT_TIMEOUT_S", 1.0)

    async def scenario() -> None:
        async def hang(request: web.Request) -> web.Response:
            await asyncio.sleep(30)
            return web.Response()

        app = web.Application()
        app.router.add_post("/hook", hang)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        config = _config(tmp_path, **{"alert.webhook.url": str(server.make_url("/hook"))})
        service = AuditService(config)
        for i in range(10):
            service.store.record_alert(("t", i * W, "dc1", "dc1"), "loss", 0, json.dumps({"i": i}))
        async with ClientSession() as http:
            started = time.monotonic()
            assert await service.deliver(http) == 0
            assert time.monotonic() - started < 6  # ten hung POSTs together (~1 s), not one after another (10 s)
        assert len(service.store.pending_alerts(int(time.time() * 1000) + 10_000)) == 10
        await server.close()
        service.store.close()

    asyncio.run(scenario())


# -- 4: windows close by watermarks ----------------------------------------------------------------


def test_windows_close_by_the_tiers_watermarks_not_the_clock() -> None:
    rows = [CountRow("t", 0, "dc1", "producer", 10, 0, 0), CountRow("t", 0, "dc1", "dc1", 4, 0, 0)]
    marks: dict[tuple[str, str], int | None] = {("producer", "t"): 10 * W, ("dc1", "t"): W - 1}

    def status() -> str:
        got = reconcile(rows, ["dc1"], {"dc1"}, W, 1000, 100 * W, watermark=lambda tier, t: marks[(tier, t)])
        return {r.tier: r.status for r in got}["dc1"]

    assert status() == "open"  # the clock says closed, but dc1 was not counted past the window
    marks[("dc1", "t")] = W + 999
    assert status() == "open"  # within grace
    marks[("dc1", "t")] = W + 1000
    assert status() == "loss"
    marks[("producer", "t")] = None  # a cluster's __audit not read yet: the expected count may grow
    assert status() == "open"


def test_after_a_restart_a_lagging_counter_raises_no_alert_and_a_wrong_alert_is_withdrawn(
    tmp_path: Path, fetch: FakeFetch, caplog: pytest.LogCaptureFixture
) -> None:
    config = _config(tmp_path, clusters="dc1")
    service = AuditService(config)
    store = service.store
    c = _counter(config, store)
    service.counters = [c]
    past = NOW - 10 * W
    # Restart: dc1 counted 4 of the window's 10 records so far; the rest are behind its lag.
    records = [_rec(past + i) for i in range(10)]
    fetch.logs[("t", 0)] = [_batch(records[:4]), _batch(records[4:], base_offset=4)]
    fetch.logs[(AUDIT_TOPIC, 0)] = [_batch([RecordInput(b"t", _event(past, 10, "g1"), past + W, [])])]
    c.offsets = {("t", 0): 0, (AUDIT_TOPIC, 0): 0}

    async def scenario() -> None:
        real = fetch.logs[("t", 0)]
        fetch.logs[("t", 0)] = real[:1]  # the first fetch returns part of the partition
        fetch_end = fetch.end
        fetch.end = lambda tp: 10 if tp == ("t", 0) else fetch_end(tp)  # type: ignore[method-assign]
        await c._round()
        assert c.lag == 6
        assert await service.check() == 0  # lag: the window is still open for dc1
        assert {r.status for r in await service.rows_async("t", None, None) if r.tier == "dc1"} == {"open"}
        fetch.logs[("t", 0)] = real
        await c._round()
        assert c.lag == 0
        assert await service.check() == 0  # caught up: complete, nothing to alert
        rows = await service.rows_async("t", None, None)
        assert {(r.tier, r.status) for r in rows} == {("producer", "complete"), ("dc1", "complete")}
        # An alert raised wrongly before (e.g. by an older version) is withdrawn.
        store.record_alert(("t", past, "dc1", "dc1"), "loss", 0, "{}")
        with caplog.at_level(logging.WARNING):
            assert await service.check() == 1
        assert "AUDIT RESOLVED: topic t" in caplog.text
        assert store.alerted()[("t", past, "dc1", "dc1")] == "resolved"
        pending = store.pending_alerts(int(time.time() * 1000))
        assert [json.loads(p.payload)["alert"] for p in pending] == ["resolved"]

    asyncio.run(scenario())
    store.close()


def test_counts_are_late_only_when_the_tier_had_closed_the_window(tmp_path: Path, fetch: FakeFetch) -> None:
    config = _config(tmp_path)
    store = Store(config.store)
    c = _counter(config, store)
    past = NOW - 100 * W  # long before the audit's clock, but the tier had not closed it: not late
    fetch.logs[("t", 0)] = [_batch([_rec(past)])]
    c.offsets = {("t", 0): 0}
    c.watermarks = {("t", 0): past}
    asyncio.run(c._round())
    assert {r.tier: r.late for r in store.counts()} == {"dc1": 0}
    fetch.logs[("t", 0)].append(_batch([_rec(past + 1)], base_offset=1))  # after the tier closed it
    asyncio.run(c._round())
    assert {r.tier: (r.count, r.late) for r in store.counts()} == {"dc1": (2, 1)}


# -- the mirror's gap events ----------------------------------------------------------------------


def _gap(guid: str = "a" * 32, **extra: Any) -> bytes:
    g = {
        "type": "gap",
        "guid": guid,
        "tier": "agg",
        "hop": "dc2->agg",
        "datacenter": "dc2",
        "topic": "t",
        "partition": 3,
        "from_offset": 1200,
        "to_offset": 1500,
        "records": 300,
        "reason": "source retention",
        "detected_ms": NOW,
    }
    g.update(extra)
    return json.dumps(g).encode()


def test_gap_events_are_stored_once_shown_and_alerted_once(
    tmp_path: Path, fetch: FakeFetch, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        server, got = await _webhook([])
        config = _config(tmp_path, **{"alert.webhook.url": str(server.make_url("/hook"))})
        service = AuditService(config)
        store = service.store
        c = _counter(config, store)
        values = [_gap(), _gap(), _gap("b" * 32, records=299), _gap("c" * 32, topic="unaudited-x"), _gap("d" * 32)]
        fetch.logs[(AUDIT_TOPIC, 0)] = [_batch([RecordInput(b"g", v, NOW, []) for v in values])]
        c.offsets = {(AUDIT_TOPIC, 0): 0}
        c.config = _config(tmp_path, **{"audit.topics": "t"})
        await c._round()
        assert [g.guid for g in store.gaps()] in (["a" * 32, "d" * 32], ["d" * 32, "a" * 32])  # once per guid
        assert [(r[4], r[3]) for r in store.rejected()] == [("bad gap", 2)]  # records != to - from
        message = "lost at mirror dc2->agg: source retention, 300 records, offsets 1200-1499"
        assert store.gaps("t")[0].describe() == message
        with caplog.at_level(logging.ERROR):
            assert await service.check() == 2
            assert await service.check() == 0
        assert caplog.text.count("AUDIT GAP: topic t partition 3, tier agg: " + message) == 2
        async with ClientSession() as http:
            assert await service.deliver(http) == 2
            assert await service.deliver(http) == 0
        assert sorted(g["guid"] for g in got) == ["a" * 32, "d" * 32]
        assert got[0]["alert"] == "gap" and got[0]["message"] == message
        # the API and the dashboard
        app = _app(service)
        async with TestClient(TestServer(app)) as client:
            r = await client.get("/api/v1/gaps", params={"topic": "t"})
            assert r.status == 200
            assert [g["message"] for g in (await r.json())["gaps"]] == [message, message]
            store.apply("x", {}, {("t", NOW, "dc2", "producer"): (1, 0)}, 0, 0)
            page = await (await client.get("/", params={"topic": "t"})).text()
            assert 'id="gaps"' in page and html.escape(message) in page
        await server.close()
        store.close()

    asyncio.run(scenario())


# -- 8: API and pages -------------------------------------------------------------------------------


def _app(service: AuditService) -> web.Application:
    from headwater.audit.web import make_app

    return make_app(
        service.rows_async,
        lambda: asyncio.to_thread(service.store.topics),
        lambda t, w, dc: asyncio.to_thread(service.store.producer_hosts, t, w, dc),
        service.registry,
        service.health,
        lambda t: asyncio.to_thread(service.store.gaps, t),
        service.recent_rows,
    )


def test_drill_down_shows_the_warehouse_bad_values_answer_400_links_are_encoded(tmp_path: Path) -> None:
    config = _config(tmp_path, clusters="dc1")
    service = AuditService(config)
    store = service.store
    topic, dc = "a&datacenter=x", "dc+1"
    past = NOW - 10 * W
    store.apply(
        "x",
        {},
        {
            (topic, past, dc, "producer"): (10, 0),
            (topic, past, dc, "warehouse"): (8, 0),
            (topic, past + W, dc, "producer"): (1, 0),
            (topic, past + W, dc, "warehouse"): (1, 0),
        },
        0,
        0,
    )
    service.counters[0].watermarks = {(topic, 0): NOW, (AUDIT_TOPIC, 0): NOW}
    service.counters[0]._topics_at = 1.0

    async def scenario() -> None:
        async with TestClient(TestServer(_app(service))) as client:
            for path, params in [
                ("/window", {"topic": topic, "window_start": "99999999999999999999", "datacenter": dc}),
                ("/window", {"topic": topic, "window_start": "-99999999999999999999", "datacenter": dc}),
                ("/window", {"topic": topic, "window_start": "x", "datacenter": dc}),
                ("/api/v1/completeness", {"from": "99999999999999999999"}),
                ("/api/v1/completeness", {"to": "1e3"}),
            ]:
                r = await client.get(path, params=params)
                assert r.status == 400, (path, params)
                assert "window_start" in await r.text() or "from" in await r.text() or "to" in await r.text()
            page = await (await client.get("/", params={"topic": topic})).text()
            assert "/window?topic=a%26datacenter%3Dx&amp;window_start=" in page
            assert "datacenter=dc%2B1" in page
            r = await client.get("/window", params={"topic": topic, "window_start": str(past), "datacenter": dc})
            text = await r.text()
            assert r.status == 200
            assert "<td>warehouse</td><td>8</td><td>10</td>" in text  # the warehouse loss, in the drill-down
            assert "loss" in text
            api = await (await client.get("/api/v1/completeness", params={"topic": topic, "to": str(past + 1)})).json()
            got = {(r["tier"], r["status"]) for r in api["rows"]}
            assert got == {("producer", "complete"), ("dc1", "loss"), ("warehouse", "loss")}  # dc1: an aggregate here

    asyncio.run(scenario())
    store.close()


# -- the store on PostgreSQL, and an existing store migrated ---------------------------------------

OLD_SCHEMA = [  # the store as commit 1ac4435 created it
    "CREATE TABLE audit_counts (topic TEXT NOT NULL, window_start BIGINT NOT NULL, datacenter TEXT NOT NULL, "
    "tier TEXT NOT NULL, count BIGINT NOT NULL, unaudited BIGINT NOT NULL DEFAULT 0, late BIGINT NOT NULL DEFAULT 0, "
    "updated_ms BIGINT NOT NULL, PRIMARY KEY (topic, window_start, datacenter, tier))",
    "CREATE TABLE audit_offsets (cluster TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL, "
    "next_offset BIGINT NOT NULL, PRIMARY KEY (cluster, topic, partition))",
    "CREATE TABLE audit_alerts (topic TEXT NOT NULL, window_start BIGINT NOT NULL, datacenter TEXT NOT NULL, "
    "tier TEXT NOT NULL, status TEXT NOT NULL, alerted_ms BIGINT NOT NULL, "
    "PRIMARY KEY (topic, window_start, datacenter, tier))",
    "INSERT INTO audit_offsets VALUES ('dc1', 't', 0, 42)",
    "INSERT INTO audit_alerts VALUES ('t', 0, 'dc1', 'agg', 'loss', 1)",
]


def test_an_existing_sqlite_store_is_migrated_in_place(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    for stmt in OLD_SCHEMA:
        conn.execute(stmt)
    conn.close()
    store = Store(f"sqlite:///{tmp_path / 'old.db'}")
    assert store.offsets("dc1") == {("t", 0): 42}
    assert store.watermarks() == {("dc1", "t"): {0: 0}}
    assert store.alerted() == {("t", 0, "dc1", "agg"): "loss"}
    assert store.pending_alerts(NOW) == []  # an old alert (no payload) is not sent again
    store.apply("dc1", {("t", 0): 50}, {}, 0, 0, previous={("t", 0): 42}, watermarks={("t", 0): 7})
    store.close()
    assert Store(f"sqlite:///{tmp_path / 'old.db'}").watermarks() == {("dc1", "t"): {0: 7}}  # opens again


def _versions(path: Path) -> list[tuple[int, str]]:
    conn = sqlite3.connect(path)
    try:
        return [(int(v), str(d)) for v, d in conn.execute("SELECT version, description FROM audit_schema_version")]
    finally:
        conn.close()


def test_schema_migrations_are_numbered_applied_in_order_once_and_recorded(tmp_path: Path) -> None:
    latest = MIGRATIONS[-1].version
    assert [m.version for m in MIGRATIONS] == list(range(1, latest + 1))
    # A store written before versioning: every migration from 1 applies, in order, over what it had.
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    for stmt in OLD_SCHEMA:
        conn.execute(stmt)
    conn.close()
    store = Store(f"sqlite:///{tmp_path / 'old.db'}")
    assert store.migrated == list(range(1, latest + 1)) and store.schema_version() == latest
    assert [v for v, _ in _versions(tmp_path / "old.db")] == list(range(1, latest + 1))
    assert store.offsets("dc1") == {("t", 0): 42}
    store.close()
    again = Store(f"sqlite:///{tmp_path / 'old.db'}")  # idempotent: nothing left to apply
    assert again.migrated == [] and again.schema_version() == latest
    assert again.offsets("dc1") == {("t", 0): 42}
    again.close()
    # A store at version 1 (before the prune indexes) gets only what it lacks.
    v1 = Store(f"sqlite:///{tmp_path / 'v1.db'}", migrations=MIGRATIONS[:1])
    assert v1.migrated == [1]
    v1.close()
    conn = sqlite3.connect(tmp_path / "v1.db")
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    conn.close()
    assert "audit_counts_by_window" not in indexes
    up = Store(f"sqlite:///{tmp_path / 'v1.db'}")
    assert up.migrated == [2] and up.schema_version() == latest
    up.close()
    conn = sqlite3.connect(tmp_path / "v1.db")
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    conn.close()
    assert {"audit_counts_by_window", "audit_rejected_by_received"} <= indexes


def test_a_failing_migration_leaves_the_store_at_the_previous_version(tmp_path: Path) -> None:
    dsn = f"sqlite:///{tmp_path / 'a.db'}"
    Store(dsn).close()
    latest = MIGRATIONS[-1].version
    broken = Migration(latest + 1, "broken", ("CREATE TABLE audit_new (a INTEGER)", "THIS IS NOT SQL"))
    with pytest.raises(StoreUnavailable, match="syntax error"):
        Store(dsn, migrations=(*MIGRATIONS, broken))
    conn = sqlite3.connect(tmp_path / "a.db")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    assert "audit_new" not in tables  # rolled back with its version row
    assert [v for v, _ in _versions(tmp_path / "a.db")] == list(range(1, latest + 1))
    fixed = Migration(latest + 1, "fixed", ("CREATE TABLE IF NOT EXISTS audit_new (a INTEGER)",))
    store = Store(dsn, migrations=(*MIGRATIONS, fixed))
    assert store.migrated == [latest + 1] and store.schema_version() == latest + 1
    store.close()
    # This code does not know version latest + 1: it refuses the store, saying why.
    with pytest.raises(SchemaTooNew, match=rf"schema version {latest + 1}, newer than this audit service knows"):
        Store(dsn)


@pytest.fixture(scope="module")
def postgres() -> Iterator[Any]:
    from tests.audit.postgres import LocalPostgres, binaries

    if binaries() is None:
        pytest.skip("no PostgreSQL server binaries (Debian's postgresql package)")
    pg = LocalPostgres().start()
    try:
        yield pg
    finally:
        pg.cleanup()


def test_postgres_store_survives_a_restart_migrates_and_compares_and_sets(postgres: Any) -> None:
    import psycopg

    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        for stmt in ["DROP SCHEMA public CASCADE", "CREATE SCHEMA public", *OLD_SCHEMA]:
            conn.execute(stmt)
    store = Store(postgres.dsn)
    other = Store(postgres.dsn)  # a second service instance
    assert store.migrated == [m.version for m in MIGRATIONS] and other.migrated == []
    assert store.schema_version() == other.schema_version() == MIGRATIONS[-1].version
    assert store.offsets("dc1") == {("t", 0): 42}
    counts = {("t", NOW, "dc1", "dc1"): (8, 0)}
    assert store.apply("dc1", {("t", 0): 50}, counts, 0, 0, previous={("t", 0): 42}) == 0
    with pytest.raises(OffsetConflict):
        other.apply("dc1", {("t", 0): 58}, counts, 0, 0, previous={("t", 0): 42})
    postgres.restart()
    with pytest.raises(StoreUnavailable):  # the old connection is gone...
        store.offsets("dc1")
    assert store.offsets("dc1") == {("t", 0): 50}  # ...and the next call reconnects

    async def counter_write() -> None:  # what a counter does: retry with backoff through a restart
        c = TierCounter("dc1", "127.0.0.1:1", _config(Path("/nonexistent")), store, admin=FakeAdmin())  # type: ignore[arg-type]
        postgres.restart()
        await c._store_call(store.apply, "dc1", {("t", 0): 60}, counts, 0, 0, previous={("t", 0): 50})

    asyncio.run(counter_write())
    assert {(r.tier, r.count) for r in store.counts("t")} == {("dc1", 16)}
    store.close()
    other.close()


# -- the mirror's heartbeats hold a cut-off datacenter's windows open at the aggregate tier -------


def _heartbeat(source: str, ts: int, target: str = "agg") -> RecordInput:
    value = {"sourceClusterAlias": source, "targetClusterAlias": target, "timestamp": ts}
    return RecordInput(f"{source}->{target}".encode(), json.dumps(value).encode(), ts, [])


def _cut_dc2(tmp_path: Path, fetch: FakeFetch, heartbeats: list[RecordInput]) -> tuple[AuditService, TierCounter, int]:
    """dc1 and dc2 each sent 10 records in one window; the agg cluster holds dc1's 10 and only 4 of
    dc2's (dc2's link to agg is cut); the agg counter is caught up with its cluster."""
    config = _config(
        tmp_path, clusters="dc1, dc2, agg", **{"dc2.bootstrap.servers": "127.0.0.1:1", "aggregate.clusters": "agg"}
    )
    service = AuditService(config)
    c = _counter(config, service.store, "agg", on_bad_event=service._count_bad)
    service.counters = [c]
    past = NOW - 10 * W
    recs = [_rec(past + i) for i in range(10)] + [_rec(past + i, "dc2") for i in range(4)]
    fetch.logs[("t", 0)] = [_batch(recs)]
    events = [_event(past, 10, "g1"), _event(past, 10, "g2", datacenter="dc2")]
    fetch.logs[(AUDIT_TOPIC, 0)] = [_batch([RecordInput(b"t", e, past + W, []) for e in events])]
    c.offsets = {("t", 0): 0, (AUDIT_TOPIC, 0): 0}
    if heartbeats:
        fetch.logs[("heartbeats", 0)] = [_batch(heartbeats)]
        c.offsets[("heartbeats", 0)] = 0
    return service, c, past


def _agg_status(rows: list[Any]) -> dict[str, str]:
    return {r.datacenter: r.status for r in rows if r.tier == "agg"}


def test_heartbeats_show_a_cut_datacenters_windows_late_at_the_aggregate_then_complete(
    tmp_path: Path, fetch: FakeFetch
) -> None:
    past = NOW - 10 * W
    stuck = past + 30_000  # dc2's newest heartbeat in agg: inside the window (the link was cut then)
    beats = [
        _heartbeat("dc2", stuck - 5000),
        _heartbeat("dc2", stuck),
        RecordInput(b"dc1->agg", b"{not json", NOW, []),  # malformed: rejected, skipped
        RecordInput(
            b"dc1->agg",
            json.dumps({"sourceClusterAlias": "dc1", "targetClusterAlias": "agg", "timestamp": "x"}).encode(),
            NOW,
            [],
        ),
        _heartbeat("dc1", NOW),
    ]
    service, c, _ = _cut_dc2(tmp_path, fetch, beats)
    store = service.store

    async def scenario() -> None:
        await c._round()
        assert c.lag == 0 and c.topic_watermark("t") is not None and c.topic_watermark("t") >= past + W + 1000
        assert c.heartbeats == {"dc1": NOW, "dc2": stuck}
        assert store.heartbeats("agg") == {"dc1": NOW, "dc2": stuck}  # with the offsets, same transaction
        # The malformed heartbeats: kept in audit_rejected, counted as bad events, never counted as records.
        assert sorted((r[1], r[3], r[4]) for r in store.rejected()) == [
            ("heartbeats", 2, "unparsable heartbeat"),
            ("heartbeats", 3, "bad field"),
        ]
        bad = service.registry.get_sample_value
        assert bad("headwater_audit_bad_events_total", {"tier": "agg", "reason": "unparsable heartbeat"}) == 1
        assert not [r for r in store.counts() if r.topic == "heartbeats"]
        # The cut: dc2's window at agg is past its end + grace, its hop lags: late (6 records still on
        # their way), not loss, no alert; dc1's closes as usual.
        assert await service.check() == 0
        rows = await service.rows_async("t", None, None)
        assert _agg_status(rows) == {"dc1": "complete", "dc2": "late"}
        cut = next(r for r in rows if r.tier == "agg" and r.datacenter == "dc2")
        assert (cut.count, cut.expected, cut.missing, cut.lagging, cut.pending) == (4, 10, 6, True, True)
        assert cut.as_json()["pending"] is True and cut.as_json()["status"] == "late"
        assert store.alerted() == {}
        # Prometheus' completeness gauge is not fed the pending window (HeadwaterAuditLoss stays quiet).
        gauge = service.registry.get_sample_value
        assert gauge("headwater_audit_completeness", {"topic": "t", "tier": "agg"}) == 1.0
        # How far behind the tier is: the oldest pending window's age (grows while the link is down).
        behind = gauge("headwater_audit_tier_behind_seconds", {"topic": "t", "tier": "agg"})
        assert behind is not None and behind >= (time.time() * 1000 - past - W) / 1000 - 5
        # The overview: late, not a problem; the records on their way, and how long the window waited.
        ov = await service.overview(hours=1000)
        entry = next(e for e in ov["entries"] if (e["datacenter"], e["tier"]) == ("dc2", "agg"))
        assert (entry["status"], entry["missing"], entry["late"]) == ("late", 0, 6)
        assert entry["behind_s"] is not None and entry["behind_s"] >= (time.time() * 1000 - past - W) // 1000 - 5
        assert ov["healthy"] and ov["headline"] == "no loss, 1 late" and ov["late"] == 1
        # The replication latency gauge, at scrape time.
        service.replication_latency.clock = lambda: (NOW + 300_000) / 1000
        latency = {
            s.labels["source"]: s.value
            for m in service.registry.collect()
            if m.name == "headwater_audit_replication_latency_seconds"
            for s in m.samples
        }
        assert latency == {"dc1": 300.0, "dc2": (NOW + 300_000 - stuck) / 1000}
        assert all(
            s.labels["tier"] == "agg" for m in service.registry.collect() for s in m.samples if "latency" in m.name
        )
        # The heal: dc2's backlog and a fresh heartbeat arrive: complete, not late.
        fetch.logs[("t", 0)].append(_batch([_rec(past + i, "dc2") for i in range(4, 10)], base_offset=14))
        fetch.logs[("heartbeats", 0)].append(_batch([_heartbeat("dc2", NOW + 1)], base_offset=5))
        await c._round()
        assert c.heartbeats["dc2"] == NOW + 1
        assert await service.check() == 0
        rows = await service.rows_async("t", None, None)
        assert _agg_status(rows) == {"dc1": "complete", "dc2": "complete"}
        assert not any(r.pending for r in rows)
        assert (
            service.registry.get_sample_value("headwater_audit_tier_behind_seconds", {"topic": "t", "tier": "agg"}) == 0
        )
        assert {(r.datacenter, r.count, r.late) for r in store.counts("t") if r.tier == "agg"} == {
            ("dc1", 10, 0),
            ("dc2", 10, 0),
        }
        assert store.alerted() == {}
        # A restarted counter resumes with the stored heartbeats.
        again = _counter(service.config, store, "agg")
        await again._load()
        assert again.heartbeats == {"dc1": NOW, "dc2": NOW + 1}

    asyncio.run(scenario())
    store.close()


def test_a_fresh_heartbeat_overtaking_the_backlog_after_a_heal_keeps_the_cut_late_for_grace(
    tmp_path: Path, fetch: FakeFetch
) -> None:
    """After a heal the mirror copies the heartbeats partition independently of the data: the first
    fresh heartbeat may reach agg before the cut's backlog. For grace.ms after heartbeats resume from
    a silence longer than grace.ms, dc2's windows are still judged by the last heartbeat before it:
    late, not loss (no alert); the backlog arriving then makes them complete, and records still
    missing once grace.ms has passed are a loss."""
    past = NOW - 10 * W
    stuck = past + 30_000
    service, c, _ = _cut_dc2(tmp_path, fetch, [_heartbeat("dc2", stuck), _heartbeat("dc1", NOW)])
    grace = service.config.grace_ms
    clock = [NOW / 1000]
    c.clock = lambda: clock[0]

    async def status() -> str:
        await service.check()
        return _agg_status(await service.rows_async("t", None, None))["dc2"]

    async def scenario() -> None:
        await c._round()
        assert await status() == "late"
        # The heal: a fresh heartbeat, and not yet the backlog.
        fetch.logs[("heartbeats", 0)].append(_batch([_heartbeat("dc2", NOW)], base_offset=2))
        await c._round()
        assert c.heartbeats["dc2"] == NOW and c.resumed == {"dc2": (stuck, NOW)}
        assert c.held_heartbeats() == {"dc1": NOW, "dc2": stuck}
        assert await status() == "late"  # still on its way: not loss
        assert service.store.alerted() == {}
        clock[0] += grace / 1000 - 1
        assert await status() == "late"
        # The backlog arrives within grace.ms of the heal: complete, and not counted as late.
        fetch.logs[("t", 0)].append(_batch([_rec(past + i, "dc2") for i in range(4, 9)], base_offset=14))
        await c._round()
        assert await status() == "late"  # 9 of 10: one record still on its way
        clock[0] += 2  # grace.ms after the heal: what is still missing is lost
        assert c.held_heartbeats() == {"dc1": NOW, "dc2": NOW} and c.resumed == {}
        assert await status() == "loss"
        assert {(k[2], k[3]): v for k, v in service.store.alerted().items()} == {("dc2", "agg"): "loss"}
        assert {(r.datacenter, r.count, r.late) for r in service.store.counts("t") if r.tier == "agg"} == {
            ("dc1", 10, 0),
            ("dc2", 9, 0),
        }

    asyncio.run(scenario())
    service.store.close()


def test_without_heartbeats_a_cut_datacenters_window_closes_as_before(tmp_path: Path, fetch: FakeFetch) -> None:
    service, c, _ = _cut_dc2(tmp_path, fetch, [])

    async def scenario() -> None:
        await c._round()
        assert c.heartbeats == {}
        assert await service.check() == 1  # today's behaviour: dc2's 6 missing records are a loss at agg
        rows = await service.rows_async("t", None, None)
        assert _agg_status(rows) == {"dc1": "complete", "dc2": "loss"}
        assert next(m for m in service.registry.collect() if "latency" in m.name).samples == []

    asyncio.run(scenario())
    service.store.close()


def test_heartbeats_bound_only_other_datacenters_aggregate_tiers() -> None:
    rows = [CountRow("t", 0, dc, tier, 10, 0, 0) for dc in ("dc1", "dc2") for tier in ("producer", dc, "agg")]
    rows += [CountRow("t", W, "dc2", "producer", 10, 0, 0), CountRow("t", W, "dc2", "agg", 6, 0, 0)]
    rows += [CountRow("t", W, "dc2", "dc2", 10, 0, 0), CountRow("t", 20 * W, "dc2", "producer", 10, 0, 0)]
    beats = {("agg", "dc1"): 10 * W, ("agg", "dc2"): W - 1, ("dc2", "dc2"): 0}

    def status(heartbeat: Any) -> dict[tuple[int, str, str], str]:
        got = reconcile(
            rows,
            ["dc1", "dc2", "agg"],
            {"dc1", "dc2"},
            W,
            1000,
            100 * W,
            watermark=lambda t, p: 10 * W,
            heartbeat=heartbeat,
        )
        return {(r.window_start // W, r.datacenter, r.tier): r.status for r in got}

    no_beats = status(None)
    assert no_beats.pop((1, "dc2", "agg")) == "loss"  # without heartbeats: judged by the tier's watermark
    assert no_beats.pop((20, "dc2", "agg")) == "open"  # not yet past end + grace by the tier's own watermark
    assert set(no_beats.values()) == {"complete", "open"}
    assert status(lambda tier, dc: None) == status(None)
    got = status(lambda tier, dc: beats.get((tier, dc)))
    # The heartbeat from dc2 is behind the window's end + grace: window 1, short by 4, is late (on
    # its way), not loss; window 0, balanced, is complete; window 20 is still open (the tier's own
    # watermark has not passed it), whatever the heartbeats say.
    assert got.pop((1, "dc2", "agg")) == "late"
    assert got.pop((20, "dc2", "agg")) == "open"
    assert {k: v for k, v in got.items() if v != "complete"} == {
        (20, "dc2", "producer"): "open",
        (20, "dc2", "dc2"): "open",
    }


def test_postgres_migrations_of_two_instances_starting_at_once_apply_once(postgres: Any) -> None:
    import threading

    import psycopg

    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        for stmt in ["DROP SCHEMA public CASCADE", "CREATE SCHEMA public"]:
            conn.execute(stmt)
    stores: list[Store] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            stores.append(Store(postgres.dsn))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(v for s in stores for v in s.migrated) == [m.version for m in MIGRATIONS]  # each once
    with psycopg.connect(postgres.dsn) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM audit_schema_version ORDER BY version")]
    assert versions == [m.version for m in MIGRATIONS]
    for s in stores:
        s.close()


# -- a mirror catching up (e.g. held by its produce quota): late, never loss, downstream too ---------


def test_a_tier_downstream_of_a_late_one_is_late_and_lost_only_once_its_upstream_is_complete(
    tmp_path: Path, fetch: FakeFetch
) -> None:
    """As seen in the lab: dc2 cut off from agg, the nightly load took what agg had (4 of dc2's 10).
    While agg is still late for the window, the warehouse is late too (not loss, no alert); once agg
    is complete the warehouse's 6 missing are a loss (the load ran before they arrived)."""
    past = NOW - 10 * W
    service, c, _ = _cut_dc2(tmp_path, fetch, [_heartbeat("dc2", past + 30_000), _heartbeat("dc1", NOW)])
    store = service.store
    store.apply(
        "loader",
        {},
        {
            ("t", past, "dc1", "warehouse"): (10, 0),
            ("t", past, "dc2", "warehouse"): (4, 0),
            ("t", past + W, "dc1", "warehouse"): (1, 0),  # a later window loaded: the warehouse is judged
        },
        0,
        0,
    )

    def statuses(rows: list[Any]) -> dict[tuple[str, str], str]:
        return {(r.datacenter, r.tier): r.status for r in rows if r.window_start == past}

    async def scenario() -> None:
        await c._round()
        assert await service.check() == 0
        rows = await service.rows_async("t", None, None)
        got = statuses(rows)
        assert (got[("dc2", "agg")], got[("dc2", "warehouse")]) == ("late", "late")
        assert (got[("dc1", "agg")], got[("dc1", "warehouse")]) == ("complete", "complete")
        wh = next(r for r in rows if (r.window_start, r.datacenter, r.tier) == (past, "dc2", "warehouse"))
        assert (wh.missing, wh.pending) == (6, True)
        assert store.alerted() == {}
        # the heal: agg receives the backlog and is complete; the warehouse, loaded before, lost 6
        fetch.logs[("t", 0)].append(_batch([_rec(past + i, "dc2") for i in range(4, 10)], base_offset=14))
        fetch.logs[("heartbeats", 0)].append(_batch([_heartbeat("dc2", NOW + 1)], base_offset=2))
        c.resumed.clear()  # (the heal's hold is the next test's subject)
        await c._round()
        c.resumed.clear()
        assert await service.check() == 1
        got = statuses(await service.rows_async("t", None, None))
        assert (got[("dc2", "agg")], got[("dc2", "warehouse")]) == ("complete", "loss")
        assert {(k[2], k[3]): v for k, v in store.alerted().items()} == {("dc2", "warehouse"): "loss"}

    asyncio.run(scenario())
    store.close()


def test_a_slow_catch_up_after_a_heal_stays_late_while_the_backlog_arrives_and_withdraws_nothing(
    tmp_path: Path, fetch: FakeFetch, caplog: pytest.LogCaptureFixture
) -> None:
    """A mirror held by its produce quota copies the cut's backlog over several grace.ms periods
    (its fresh heartbeats overtake it at once). While the backlog keeps arriving the mirror is behind
    on the flow: dc2's window stays late, never loss, no alert and no 'resolved' for one never raised;
    it turns complete when the last record arrives. A backlog that stops short is a loss grace.ms
    after the last of it arrived."""
    past = NOW - 10 * W
    stuck = past + 30_000
    service, c, _ = _cut_dc2(tmp_path, fetch, [_heartbeat("dc2", stuck), _heartbeat("dc1", NOW)])
    grace = service.config.grace_ms / 1000
    clock = [NOW / 1000]
    c.clock = lambda: clock[0]
    offset = [14]

    async def status() -> str:
        await service.check()
        return _agg_status(await service.rows_async("t", None, None))["dc2"]

    def arrive(first: int, n: int) -> None:
        fetch.logs[("t", 0)].append(_batch([_rec(past + i, "dc2") for i in range(first, first + n)], offset[0]))
        offset[0] += n

    async def scenario() -> None:
        await c._round()
        fetch.logs[("heartbeats", 0)].append(_batch([_heartbeat("dc2", NOW)], base_offset=2))  # the heal
        await c._round()
        assert await status() == "late"
        for first in (4, 5, 6, 7):  # one record per 0.9 grace.ms: the catch-up takes 3.6 grace.ms
            clock[0] += 0.9 * grace
            arrive(first, 1)
            await c._round()
            assert await status() == "late", f"after {first + 1} of 10"
        assert service.store.alerted() == {}
        clock[0] += 0.9 * grace
        arrive(8, 1)
        await c._round()
        assert await status() == "late"  # 9 of 10
        clock[0] += 1.1 * grace  # nothing more arrived for grace.ms: the mirror is no longer behind
        assert await status() == "loss"
        assert {(k[2], k[3]): v for k, v in service.store.alerted().items()} == {("dc2", "agg"): "loss"}
        arrive(9, 1)  # it did come after all: the alert raised is withdrawn
        await c._round()
        assert await status() == "late"  # complete, counted late (the tier had closed the window)
        assert "AUDIT RESOLVED" in caplog.text

    with caplog.at_level(logging.INFO):
        asyncio.run(scenario())
    assert caplog.text.count("AUDIT RESOLVED") == 1 and caplog.text.count("AUDIT LOSS") == 1
    service.store.close()
