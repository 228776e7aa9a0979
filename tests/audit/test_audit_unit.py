"""The audit's pure parts and its store on a real SQLite file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from headwater.audit.config import AuditConfigError, parse
from headwater.audit.counter import count_batch, parse_event
from headwater.audit.reconcile import reconcile
from headwater.audit.store import CountRow, Store
from headwater.protocol.records.compression import Codec
from headwater.protocol.records.header import read_header
from headwater.protocol.records.record import RecordInput, encode_batch

W = 60_000


def test_store_counts_events_once_and_keeps_offsets_in_the_same_transaction(tmp_path: Path) -> None:
    s = Store(f"sqlite:///{tmp_path / 'audit.db'}")
    event = {"guid": "g1", "tier": "producer", "datacenter": "dc1", "topic": "t", "window_start": 0, "count": 10}
    assert s.apply("dc1", {("t", 0): 7}, {("t", 0, "dc1", "dc1"): (7, 0)}, 1, 0, [event]) == 1
    assert s.apply("dc1", {("t", 0): 10}, {("t", 0, "dc1", "dc1"): (3, 0)}, 2, 0, [event]) == 0  # guid seen: ignored
    s.close()
    s = Store(f"sqlite:///{tmp_path / 'audit.db'}")  # a restart reads what was committed
    assert s.offsets("dc1") == {("t", 0): 10}
    counts = {(r.tier, r.count) for r in s.counts("t")}
    assert counts == {("producer", 10), ("dc1", 10)}
    with pytest.raises(KeyError):  # a failing transaction leaves nothing behind
        s.apply("dc1", {("t", 0): 99}, {("t", 0, "dc1", "dc1"): (5, 0)}, 3, 0, [{"guid": "g2"}])
    assert s.offsets("dc1") == {("t", 0): 10}
    assert {(r.tier, r.count) for r in s.counts("t")} == counts


def test_reconcile_statuses() -> None:
    from headwater.audit.store import CountRow

    rows = [
        CountRow("t", 0, "dc1", "producer", 100, 0, 0),
        CountRow("t", 0, "dc1", "dc1", 100, 0, 0),
        CountRow("t", 0, "dc1", "agg", 97, 0, 0),
        CountRow("t", 0, "dc2", "producer", 50, 0, 0),
        CountRow("t", 0, "dc2", "dc2", 52, 0, 0),
        CountRow("t", 0, "dc2", "agg", 50, 0, 4),
        CountRow("t", W, "dc1", "producer", 5, 0, 0),
    ]
    got = {
        (r.datacenter, r.tier): (r.status, r.missing)
        for r in reconcile(rows, ["dc1", "dc2", "agg"], {"dc1", "dc2"}, W, 1000, now_ms=W + 1500)
        if r.window_start == 0
    }
    assert got[("dc1", "agg")] == ("loss", 3)
    assert got[("dc2", "dc2")] == ("duplicates", 0)
    assert got[("dc2", "agg")] == ("late", 0)
    assert got[("dc1", "dc1")] == ("complete", 0)
    assert ("dc1", "dc2") not in got  # dc1's records are not expected in dc2's cluster
    later = reconcile(rows, ["dc1", "dc2", "agg"], {"dc1", "dc2"}, W, 1000, now_ms=W + 1500)
    assert [r.status for r in later if r.window_start == W] == ["open", "open", "open"]  # producer, dc1, agg


def test_a_batch_in_one_window_is_counted_from_its_header_others_record_by_record() -> None:
    def rec(i: int, created: int, dc: bytes | None) -> RecordInput:
        headers = [("origin.dc", dc), ("origin.created", str(created).encode())] if dc else []
        return RecordInput(b"k", b"v%d" % i, created, headers)

    counts: dict[tuple[str, int, str, str], list[int]] = {}
    from collections import defaultdict

    counts = defaultdict(lambda: [0, 0])
    one_window = encode_batch([rec(i, 1000 + i, b"dc1") for i in range(50)], compression=Codec.LZ4)
    two_windows = encode_batch([rec(i, W - 5 + i, b"dc2") for i in range(10)])
    no_origin = encode_batch([rec(i, 2000, None) for i in range(3)])
    for b in (one_window, two_windows, no_origin):
        count_batch("dc1", "t", W, read_header(b), memoryview(b), counts)
    assert dict(counts) == {
        ("t", 0, "dc1", "dc1"): [50, 0],
        ("t", 0, "dc2", "dc1"): [5, 0],
        ("t", W, "dc2", "dc1"): [5, 0],
        ("t", 0, "-", "dc1"): [3, 3],
    }


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        json.dumps({"guid": "g", "tier": "producer"}).encode(),
        None,
        json.dumps(
            {"guid": "g", "tier": "hacker", "datacenter": "d", "topic": "t", "window_start": 0, "count": 1}
        ).encode(),
        json.dumps(
            {"guid": "g", "tier": "producer", "datacenter": "d", "topic": "t", "window_start": 0, "count": "1"}
        ).encode(),
    ],
)
def test_malformed_count_events_are_rejected(raw: bytes | None) -> None:
    assert parse_event(raw) is None


def test_bad_configuration_is_one_line() -> None:
    with pytest.raises(AuditConfigError, match=r"^dc9.bootstrap.servers: cluster 'dc9' is not in clusters"):
        parse({"clusters": "dc1", "dc1.bootstrap.servers": "h:1", "dc9.bootstrap.servers": "h:2"})
    with pytest.raises(AuditConfigError, match=re.escape("audit.topics: 'a(' is not a valid regex")):
        parse({"clusters": "dc1", "dc1.bootstrap.servers": "h:1", "audit.topics": "a("})
    with pytest.raises(AuditConfigError, match="store: 'mysql://x' is not"):
        parse({"clusters": "dc1", "dc1.bootstrap.servers": "h:1", "store": "mysql://x"})


def test_aggregate_clusters_name_the_aggregate_tiers() -> None:
    from headwater.audit.store import CountRow

    rows = [CountRow("t", 0, "dc1", "producer", 5, 0, 0), CountRow("t", 0, "dc1", "dc1", 5, 0, 0)]
    # Before dc2's producers have reported, "dc2" looks like an aggregate by name alone...
    guessed = reconcile(rows, ["dc1", "dc2", "agg"], {"dc1"}, W, 0, now_ms=W)
    assert {r.tier for r in guessed} == {"producer", "dc1", "dc2", "agg"}
    # ...aggregate.clusters says which clusters hold every DC's records.
    named = reconcile(rows, ["dc1", "dc2", "agg"], {"dc1"}, W, 0, now_ms=W, aggregates=frozenset({"agg"}))
    assert {r.tier for r in named} == {"producer", "dc1", "agg"}


def test_warehouse_tier_is_due_once_a_later_window_was_loaded() -> None:
    """A load runs while its newest window is still being written: that window is not judged at the
    warehouse tier (no nightly false alarm) until a later load reaches past it."""
    W = 60_000
    rows = [
        CountRow("t", 0, "dc1", "producer", 100, 0, 0),
        CountRow("t", 0, "dc1", "dc1", 100, 0, 0),
        CountRow("t", 0, "dc1", "warehouse", 100, 0, 100),  # counted after the window closed: a nightly load
        CountRow("t", W, "dc1", "producer", 100, 0, 0),
        CountRow("t", W, "dc1", "dc1", 100, 0, 0),
        CountRow("t", W, "dc1", "warehouse", 40, 0, 0),  # loaded while the window was being written
    ]
    tiers = {(r.window_start, r.tier): r.status for r in reconcile(rows, ["dc1"], {"dc1"}, W, 1000, now_ms=10 * W)}
    assert tiers[(0, "warehouse")] == "complete"  # not "late": the warehouse is late by design
    assert (W, "warehouse") not in tiers
    # the next load counts the rest of that window and reaches a later one: now it is judged
    rows += [
        CountRow("t", W, "dc1", "warehouse", 100, 0, 0),  # the store sums a window's events: 40 + 60
        CountRow("t", 2 * W, "dc1", "producer", 10, 0, 0),
        CountRow("t", 2 * W, "dc1", "warehouse", 3, 0, 0),
    ]
    rows = [r for r in rows if not (r.window_start == W and r.tier == "warehouse" and r.count == 40)]
    tiers = {(r.window_start, r.tier): r.status for r in reconcile(rows, ["dc1"], {"dc1"}, W, 1000, now_ms=10 * W)}
    assert tiers[(W, "warehouse")] == "complete"
    assert (2 * W, "warehouse") not in tiers


def test_the_lab_check_does_not_take_a_pending_late_window_as_closed() -> None:
    """``headwater lab check`` reads the last closed windows from the API: a window that is late and
    still short while its hop lags (``pending``) is not balanced, not closed, and not reported as ok."""
    import io

    from headwater.lab.check import audit_status

    def row(w: int, dc: str, tier: str, count: int, status: str, pending: bool = False) -> dict[str, object]:
        return {
            "topic": "t",
            "window_start": w,
            "window_end": w + W,
            "datacenter": dc,
            "tier": tier,
            "count": count,
            "expected": 10,
            "status": status,
            "pending": pending,
        }

    rows = [row(0, "dc2", t, 10, "complete") for t in ("producer", "dc2", "agg")]
    rows += [row(W, "dc2", "producer", 10, "complete"), row(W, "dc2", "dc2", 10, "complete")]
    rows += [row(W, "dc2", "agg", 4, "late", pending=True)]

    def opener(url: str, timeout: float) -> io.BytesIO:
        return io.BytesIO(json.dumps({"rows": rows}).encode())

    got = audit_status("http://audit", ["t"], windows=2, opener=opener)
    assert [(w["window_start"], w["status"]) for w in got] == [(0, "complete")]


def test_a_tier_is_lost_only_where_the_tier_feeding_it_is_settled() -> None:
    """dc1's own cluster is still open for window 0 (its counter lags): agg, short of records that
    may still be on their way through it, is late, not loss; once dc1's tier has closed complete,
    agg's shortfall is a loss. Config order does not matter (agg listed first)."""
    W = 60_000
    rows = [
        CountRow("t", 0, "dc1", "producer", 10, 0, 0),
        CountRow("t", 0, "dc1", "dc1", 10, 0, 0),
        CountRow("t", 0, "dc1", "agg", 7, 0, 0),
    ]

    def agg(dc1_watermark: int) -> tuple[str, bool]:
        marks = {"producer": 10 * W, "agg": 10 * W, "dc1": dc1_watermark}
        got = reconcile(rows, ["agg", "dc1"], {"dc1"}, W, 1000, 10 * W, watermark=lambda tier, _t: marks[tier])
        r = next(r for r in got if r.tier == "agg")
        return r.status, r.pending

    assert agg(W) == ("late", True)  # dc1's tier not past end + grace yet
    assert agg(10 * W) == ("loss", False)
