"""Counting one cluster's tier, and reading its ``__audit`` events (counts and the mirror's gaps).

Every record is counted in the window of its own creation time (``origin.created``) under its own
``origin.dc``. A batch header cannot prove that a batch falls into one window (its base timestamp is
the *first* record's, not the smallest: a batch ``[60000, 59999]`` straddles) nor that its records
share one origin (a re-producer keeping origin headers mixes datacenters), so batches are counted
record by record, in the compiled record codec (protocol/records/counting.py: no Record object per
record). A record without origin headers is counted as unaudited (datacenter ``-``) at this
cluster, by its timestamp.

Every fetch round's counts, events, rejected events, gaps and the offsets reached go to the store in
one transaction that checks the offsets it started from (compare-and-set, :meth:`Store.apply`).

Heartbeats: an aggregate tier also reads its cluster's ``heartbeats`` topic (``heartbeats.topic``),
where the mirror copies one record per flow every few seconds (mirror/headwater/mirror/heartbeats.py:
MirrorMaker 2's binary ``Heartbeat``, key ``("dc2", "agg")``, value version + timestamp; the JSON
value ``{"sourceClusterAlias": "dc2", "targetClusterAlias": "agg", "timestamp": ms}`` of mirrors
before it is still read, for an upgrade). Per source
datacenter it keeps the newest timestamp seen, stored in the same transaction as the offsets. A
datacenter's windows close at this tier only once its heartbeats passed them too (reconcile.py): a
tier caught up with its cluster has not seen the records of a datacenter whose link is cut. A
malformed heartbeat is rejected like a bad ``__audit`` event (audit_rejected, the bad-events metric).

Events are authenticated (review M8) when ``audit.signing.key`` is set (signing.py): a count or gap
event without a valid ``audit.signature`` header (HMAC-SHA256 of its value) is refused — kept in
``audit_rejected`` as ``unsigned`` or ``bad signature``, counted, and logged once per producer
(datacenter and host) rather than once per event. The topic names a service tracks are capped
(``audit.max.topics``, :class:`TopicLimit`): an event or an audited topic beyond the cap is refused
(``too many topics``) and counted, so forged names cannot grow the store and the metrics' labels
without bound.

Transactions (KIP-98): the tier reads read_committed, as the mirror and the loader do: it counts
only committed records (an aborted transaction's records and the markers are read past, never
counted), up to the last stable offset; a transaction still open holds the partition's count
there, and the partition's watermark at the newest record counted (its windows stay open), until
it ends.

Watermarks: per partition, how far in creation time this tier has been counted — the time of the
fetch when the counter has caught up (its offset reached the high watermark), otherwise the largest
timestamp counted so far. A window closes for a tier only when that tier's watermark has passed the
window's end plus the grace period on every partition (reconcile.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from headwater.audit.config import AuditConfig
from headwater.audit.store import UNAUDITED_DC, CountKey, Gap, OffsetConflict, Rejected, Store, StoreUnavailable
from headwater.client.admin import Admin
from headwater.client.audit import AUDIT_TOPIC, HEADER_CREATED, HEADER_DC, HEADER_SIGNATURE, verify_event
from headwater.client.consumer import Consumer
from headwater.client.errors import OffsetOutOfRangeError
from headwater.client.raw import READ_COMMITTED, fetch_raw
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.counting import count_origins
from headwater.protocol.records.header import BatchHeader
from headwater.protocol.records.record import Record, decode_batch
from headwater.service.supervisor import FatalError, Unit

log = logging.getLogger("headwater.audit.counter")

TIERS_FROM_EVENTS = ("producer", "warehouse")
MAX_TIMESTAMP = 2**62  # creation times and windows beyond this are not times (and overflow BIGINT sums)
MAX_COUNT = 2**40  # more records than any producer sends in one window
TopicPartition = tuple[str, int]
#: rejections logged once per producer (or once) rather than once per event: a flood of forged
#: events must not become a flood of log lines
QUIET_REASONS = frozenset({"unsigned", "bad signature", "too many topics"})
MAX_PRODUCERS_LOGGED = 1000

_EVENT_FIELDS = {"guid": str, "tier": str, "datacenter": str, "topic": str, "window_start": int, "count": int}
_HEARTBEAT_FIELDS = {"sourceClusterAlias": str, "targetClusterAlias": str, "timestamp": int}
_GAP_FIELDS = {
    "guid": str,
    "tier": str,
    "hop": str,
    "datacenter": str,
    "topic": str,
    "reason": str,
    "partition": int,
    "from_offset": int,
    "to_offset": int,
    "records": int,
    "detected_ms": int,
}


class BadEvent(ValueError):
    """An ``__audit`` record that is not a valid event; ``reason`` is a short label (a metric label)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class TopicLimit:
    """At most ``maximum`` distinct topic names tracked (``audit.max.topics``), shared by every tier's
    counter and the service's metrics: the first ones seen (or stored) are admitted, any other is
    refused and counted (``headwater_audit_topics_refused_total``), with one ERROR line the first time.
    Used on the event loop only."""

    def __init__(
        self, maximum: int, known: list[str] | tuple[str, ...] = (), on_refused: Callable[[], None] | None = None
    ) -> None:
        self.maximum = maximum
        self.topics: set[str] = set(sorted(known)[:maximum])
        self.on_refused = on_refused or (lambda: None)
        self.refused = 0

    def admit(self, topic: str, *, count: bool = True) -> bool:
        """Whether ``topic`` is tracked (admitted now if there is room); a refusal is counted unless
        ``count`` is false (the metrics asking again on every pass)."""
        if topic in self.topics:
            return True
        if len(self.topics) < self.maximum:
            self.topics.add(topic)
            return True
        if not count:
            return False
        if not self.refused:
            log.error(
                "audit.max.topics (%d) reached: refusing events and audited topics of any further topic name "
                "(first: %r); raise audit.max.topics if they are real (headwater_audit_topics_refused_total)",
                self.maximum,
                topic[:100],
            )
        self.refused += 1
        self.on_refused()
        return False


def count_batch(
    alias: str,
    topic: str,
    window_ms: int,
    h: BatchHeader,
    batch: memoryview,
    counts: dict[CountKey, list[int]],
    min_offset: int = 0,
) -> None:
    """Add one batch's records from ``min_offset`` on to ``counts`` ((count, unaudited) per (topic,
    window, dc, tier)), each in the window of its own creation time and under its own datacenter.

    The per-record loop runs in the compiled record codec (protocol/records/counting.py; its
    pure-Python reference when the codec is not built): no Record object per record."""
    found = count_origins(batch, window_ms, min_offset, HEADER_DC, HEADER_CREATED, MAX_TIMESTAMP, header=h)
    for (window, dc), n in found.items():
        if dc is None:  # no (valid) origin headers: unaudited, in the window of its timestamp
            c = counts[(topic, window, UNAUDITED_DC, alias)]
            c[0] += n
            c[1] += n
        else:
            counts[(topic, window, dc, alias)][0] += n


def _fields(e: dict[str, Any], spec: dict[str, type]) -> None:
    for name, kind in spec.items():
        if name not in e:
            raise BadEvent("missing field", name)
        value = e[name]
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise BadEvent("bad field", f"{name} is not an integer")
        elif not isinstance(value, str) or not value:
            raise BadEvent("bad field", f"{name} is not a non-empty string")


def parse_audit_record(raw: bytes | None, window_ms: int) -> tuple[str, Any]:
    """``("count", event dict)`` or ``("gap", Gap)``; raises :class:`BadEvent` for anything else."""
    try:
        e = json.loads(raw or b"")
    except (ValueError, RecursionError) as ex:  # RecursionError: b"[" * 200000
        raise BadEvent("unparsable", type(ex).__name__) from None
    if not isinstance(e, dict):
        raise BadEvent("not an object")
    kind = e.get("type", "count")
    if kind == "gap":
        _fields(e, _GAP_FIELDS)
        lo, hi, n = e["from_offset"], e["to_offset"], e["records"]
        if not (0 <= lo <= hi < MAX_TIMESTAMP) or n != hi - lo or not 0 <= e["partition"] < 2**31:
            raise BadEvent("bad gap", f"offsets {lo}-{hi}, records {n}, partition {e['partition']}")
        if not 0 <= e["detected_ms"] < MAX_TIMESTAMP:
            raise BadEvent("timestamp out of range", f"detected_ms {e['detected_ms']}")
        return "gap", Gap(
            e["guid"],
            e["tier"],
            e["hop"],
            e["datacenter"],
            e["topic"],
            e["partition"],
            lo,
            hi,
            n,
            e["reason"],
            e["detected_ms"],
        )
    if kind != "count":
        raise BadEvent("unknown type", str(kind)[:50])
    _fields(e, _EVENT_FIELDS)
    if e["tier"] not in TIERS_FROM_EVENTS:
        raise BadEvent("unknown tier", e["tier"][:50])
    if not 0 <= e["count"] <= MAX_COUNT:
        raise BadEvent("count out of range", str(e["count"])[:30])
    start = e["window_start"]
    if not 0 <= start < MAX_TIMESTAMP:
        raise BadEvent("timestamp out of range", f"window_start {str(start)[:30]}")
    if start % window_ms:
        raise BadEvent("window not on grid", f"window_start {start} is not a multiple of window.ms {window_ms}")
    end = e.get("window_end")
    if end is not None and (isinstance(end, bool) or not isinstance(end, int) or end - start != window_ms):
        raise BadEvent("window length", f"window_end - window_start is not window.ms {window_ms}")
    return "count", e


def _mm2_string(data: bytes, at: int) -> tuple[str, int]:
    n = int.from_bytes(data[at : at + 2], "big", signed=True)
    if at + 2 > len(data) or n < 0 or at + 2 + n > len(data):
        raise ValueError("truncated STRING")
    return data[at + 2 : at + 2 + n].decode(), at + 2 + n


def parse_heartbeat(raw: bytes | None, key: bytes | None = None) -> tuple[str, int]:
    """(source datacenter, timestamp ms) of a mirror heartbeat -- MM2's binary record (key: source and
    target alias as protocol STRINGs; value: INT16 version >= 0, INT64 timestamp), or the JSON value
    of earlier mirrors; raises :class:`BadEvent` otherwise."""
    if raw is not None and len(raw) == 10 and key is not None and not raw.startswith(b"{"):
        try:
            source, at = _mm2_string(bytes(key), 0)
            _, at = _mm2_string(bytes(key), at)
        except ValueError as ex:
            raise BadEvent("unparsable heartbeat", str(ex)) from None
        version = int.from_bytes(raw[:2], "big", signed=True)
        ts = int.from_bytes(raw[2:], "big", signed=True)
        if at != len(key) or version < 0 or not source:
            raise BadEvent("unparsable heartbeat", "not an MM2 heartbeat")
        if not 0 <= ts < MAX_TIMESTAMP:
            raise BadEvent("timestamp out of range", f"heartbeat timestamp {ts}")
        return source, ts
    try:
        e = json.loads(raw or b"")
    except (ValueError, RecursionError) as ex:
        raise BadEvent("unparsable heartbeat", type(ex).__name__) from None
    if not isinstance(e, dict):
        raise BadEvent("heartbeat not an object")
    _fields(e, _HEARTBEAT_FIELDS)
    if not 0 <= e["timestamp"] < MAX_TIMESTAMP:
        raise BadEvent("timestamp out of range", f"heartbeat timestamp {str(e['timestamp'])[:30]}")
    return e["sourceClusterAlias"], e["timestamp"]


def parse_event(raw: bytes | None, window_ms: int = 1) -> dict[str, Any] | None:
    """A count event, or None when it is not one (malformed, out of range, or a gap)."""
    try:
        kind, e = parse_audit_record(raw, window_ms)
    except BadEvent:
        return None
    return e if kind == "count" else None


class TierCounter:
    """Counts one cluster (alias) into the store, resuming from the stored offsets.

    ``run`` is meant to be supervised (headwater.service.supervisor): it raises when it cannot go
    on (the store down past its retries, a broker error) and is started again, from the store.
    """

    def __init__(
        self,
        alias: str,
        bootstrap: str,
        config: AuditConfig,
        store: Store,
        *,
        on_bad_event: Callable[[str, str], None] | None = None,
        store_retries: int = 6,
        admin: Admin | None = None,
        topic_limit: TopicLimit | None = None,
    ) -> None:
        self.alias = alias
        security = config.security.get(alias)
        self.config = config
        self.store = store
        self.admin = admin or Admin(bootstrap, client_id="headwater-audit", security=security)
        self.cluster = self.admin.cluster
        self.offsets: dict[TopicPartition, int] = {}
        self.stored: dict[TopicPartition, int] = {}  # what the store holds (the compare-and-set base)
        self.high_watermarks: dict[TopicPartition, int] = {}
        self.watermarks: dict[TopicPartition, int] = {}
        self.heartbeats: dict[str, int] = {}  # source datacenter -> newest heartbeat (ms) seen here
        # source datacenter -> (newest heartbeat before a silence longer than grace.ms, when they
        # resumed (ms)): the hop was cut and has just healed (see held_heartbeats)
        self.resumed: dict[str, tuple[int, int]] = {}
        # source datacenter -> when (ms) this tier last counted records of it created before its
        # heartbeats resumed: the mirror is still copying the cut's backlog (see held_heartbeats)
        self.backlog_at: dict[str, int] = {}
        self.clock: Callable[[], float] = time.time
        self.records_counted = 0
        self.events_seen = 0
        self.rejected = 0
        self.store_error = ""
        self.on_bad_event = on_bad_event or (lambda tier, reason: None)
        self.store_retries = store_retries
        self._topics_at = 0.0
        self.topic_limit = topic_limit or TopicLimit(config.max_topics)
        self._refused_producers: set[tuple[str, str, str]] = set()  # (reason, datacenter, host) logged
        self._refused_topics: set[str] = set()  # audited topics of the cluster beyond audit.max.topics

    @property
    def lag(self) -> int:
        return sum(max(hw - self.offsets.get(tp, 0), 0) for tp, hw in self.high_watermarks.items())

    @property
    def counted_offsets(self) -> int:
        return sum(self.stored.values())

    def audit_watermark(self) -> int | None:
        """How far this tier's ``__audit`` events were read: None before the topics were listed,
        unbounded when the cluster has no ``__audit``."""
        wm = self.topic_watermark(AUDIT_TOPIC)
        if not self._topics_at:
            return wm
        return MAX_TIMESTAMP if wm is None else wm

    def topic_watermark(self, topic: str) -> int | None:
        """How far (creation time, ms) this tier has counted every partition of ``topic``; None when
        it has no partition of it."""
        wms = [wm for (t, _), wm in self.watermarks.items() if t == topic]
        return min(wms) if wms else None

    @property
    def aggregate(self) -> bool:
        """Whether this tier reads heartbeats: listed in ``aggregate.clusters``, or (without that
        list) any cluster — the heartbeats then only matter at the tiers reconcile treats as
        aggregates for a datacenter (not the datacenter's own cluster)."""
        return self.config.aggregates is None or self.alias in self.config.aggregates

    async def close(self) -> None:
        await self.admin.close()

    async def run(self, unit: Unit | None = None) -> None:
        """Count until cancelled; ``unit.progress()`` after every round (the supervisor's stuck check)."""
        await self._load()
        while True:
            if time.monotonic() - self._topics_at > 5 or not self.offsets:
                await self._discover()
            if not self.offsets:
                if unit is not None:
                    unit.progress()
                await asyncio.sleep(1)
                continue
            await self._round()
            if unit is not None:
                unit.progress()

    async def _load(self) -> None:
        stored = await self._store_call(self.store.offsets, self.alias)
        wms = await self._store_call(self.store.watermarks)
        self.offsets = dict(stored)
        self.stored = dict(stored)
        for source, newest in (await self._store_call(self.store.heartbeats, self.alias)).items():
            self.heartbeats[source] = max(newest, self.heartbeats.get(source, 0))
        for (cluster, topic), parts in wms.items():
            if cluster == self.alias:
                for p, wm in parts.items():
                    self.watermarks[(topic, p)] = max(wm, self.watermarks.get((topic, p), 0))

    async def _store_call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn`` on a worker thread; a store fault (PostgreSQL restarted, SQLite locked) is retried
        with doubling backoff, then raised (the supervisor restarts the counter)."""
        backoff = 0.2
        for attempt in range(self.store_retries + 1):
            try:
                result = await asyncio.to_thread(fn, *args, **kwargs)
                if self.store_error:
                    log.warning("%s: the store answers again", self.alias)
                self.store_error = ""
                return result
            except StoreUnavailable as e:
                self.store_error = str(e)
                if attempt == self.store_retries:
                    raise
                log.warning("%s: store unavailable (%s); retrying in %.1f s", self.alias, e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        raise AssertionError("unreachable")

    async def _discover(self) -> None:
        topics = await self.admin.list_topics(include_internal=True)
        consumer = Consumer("", cluster=self.cluster)
        for t in topics:
            if t != AUDIT_TOPIC and not self.config.audited(t) and not self._is_heartbeats(t):
                continue
            if t != AUDIT_TOPIC and not self._is_heartbeats(t):
                if t in self._refused_topics:
                    continue
                if not self.topic_limit.admit(t):  # counted once per topic, not at every discovery
                    self._refused_topics.add(t)
                    continue
            for p in await consumer.partitions_for(t):
                if (t, p) not in self.offsets:
                    self.offsets[(t, p)] = await consumer.earliest_offset(t, p)
                    self.watermarks.setdefault((t, p), 0)
        self._topics_at = time.monotonic()

    def _is_heartbeats(self, topic: str) -> bool:
        return self.aggregate and topic == self.config.heartbeats_topic

    async def _reset(self, e: OffsetOutOfRangeError) -> None:
        """OFFSET_OUT_OF_RANGE: below the log start, the records in between are gone before they were
        counted (resume at the log start, loudly); past the log end (unclean truncation, topic
        re-created), resume at the log end: counting again from the earliest would count twice."""
        consumer = Consumer("", cluster=self.cluster)
        tp = (e.topic, e.partition)
        offset = self.offsets.get(tp, e.offset)
        earliest = await consumer.earliest_offset(*tp)
        latest = await consumer.latest_offset(*tp)
        if offset < earliest:
            target = earliest
            log.error(
                "%s: %s-%d: offsets %d-%d were deleted before they were counted (retention); this tier's counts "
                "miss them; counting resumes at the log start %d",
                self.alias,
                *tp,
                offset,
                earliest - 1,
                earliest,
            )
        elif offset > latest:
            target = latest
            log.warning(
                "%s: %s-%d: counted offset %d is past the log end %d (unclean leader election or topic re-created); "
                "counting resumes at the log end, records below it are not counted again",
                self.alias,
                *tp,
                offset,
                latest,
            )
        else:
            return  # in range again (a leader change): fetch again
        await self._commit({tp: target}, {}, [], [], [], {})

    async def _commit(
        self,
        moved: dict[TopicPartition, int],
        counts: dict[CountKey, tuple[int, int]],
        events: list[dict[str, Any]],
        rejected: list[Rejected],
        gaps: list[Gap],
        closed_before: dict[str, int],
        heartbeats: dict[str, int] | None = None,
        closed_before_dc: dict[tuple[str, str], int] | None = None,
    ) -> int | None:
        """Write one round; None when another writer moved the offsets (the round is dropped)."""
        previous = {tp: self.stored.get(tp) for tp in moved}
        try:
            new = await self._store_call(
                self.store.apply,
                self.alias,
                moved,
                counts,
                int(time.time() * 1000),
                closed_before,
                events,
                rejected,
                previous=previous,
                watermarks={tp: self.watermarks.get(tp, 0) for tp in moved},
                gaps=gaps,
                heartbeats=heartbeats,
                closed_before_dc=closed_before_dc,
            )
        except OffsetConflict as e:
            log.error("%s: %s; this round is dropped and counting resumes from the stored offsets", self.alias, e)
            stored = await self._store_call(self.store.offsets, self.alias)
            self.stored = dict(stored)
            self.offsets.update(stored)
            return None
        self.stored.update(moved)
        self.offsets.update(moved)
        now = int(self.clock() * 1000)
        w = self.config.window_ms
        for _topic, start, dc, _tier in counts:
            held = self.resumed.get(dc)
            if held is not None and start + w <= held[1]:  # a window that ended before the heal
                self.backlog_at[dc] = now
        for source, newest in (heartbeats or {}).items():
            before = self.heartbeats.get(source)
            if before is not None and newest - before > self.config.grace_ms:
                self.resumed[source] = (before, now)  # a silence longer than grace: the hop has healed
            self.heartbeats[source] = max(newest, self.heartbeats.get(source, 0))
        return int(new)

    def held_heartbeats(self, now_ms: int | None = None) -> dict[str, int]:
        """Per source datacenter, the heartbeat its windows here are judged by (reconcile.py): the
        newest one seen — except for ``grace.ms`` after heartbeats resumed from a silence longer than
        ``grace.ms`` (a cut link healed, a mirror restarted), when it is still the last one before the
        silence. The mirror copies the heartbeats partition independently of the data partitions: after
        a heal the first fresh heartbeat can reach this cluster before the backlog of the cut, and the
        windows of the cut must stay ``late`` (not turn ``loss``) while the backlog arrives.

        The hold lasts while the mirror is behind on the flow: until ``grace.ms`` has passed both since
        the heal and since this tier last counted a record of the datacenter from a window that ended
        before the heal (``backlog_at``). A mirror held by its produce quota may take far longer than
        ``grace.ms`` to copy a long cut's backlog: its windows stay ``late`` while the backlog keeps
        arriving, and what is still missing once it stopped arriving for ``grace.ms`` is ``loss``."""
        now = int(self.clock() * 1000) if now_ms is None else now_ms
        out = dict(self.heartbeats)
        for source, (before, resumed_at) in list(self.resumed.items()):
            if now < max(resumed_at, self.backlog_at.get(source, 0)) + self.config.grace_ms:
                out[source] = before
            else:
                del self.resumed[source]
                self.backlog_at.pop(source, None)
        return out

    async def _round(self) -> None:
        requests = [(t, p, o) for (t, p), o in self.offsets.items()]
        fetched_at = int(time.time() * 1000)
        try:
            got, failed = await fetch_raw(
                self.cluster, requests, max_wait_ms=self.config.fetch_max_wait_ms, isolation_level=READ_COMMITTED
            )
        except OffsetOutOfRangeError as e:
            await self._reset(e)
            return
        if failed:
            await self.cluster.refresh({t for t, _ in failed})
        w = self.config.window_ms
        counts: dict[CountKey, list[int]] = defaultdict(lambda: [0, 0])
        events: list[dict[str, Any]] = []
        rejected: list[Rejected] = []
        gaps: list[Gap] = []
        moved: dict[TopicPartition, int] = {}
        # What this tier had closed before the round: a count for such a window arrives late.
        closed_before = {
            t: wm - w - self.config.grace_ms for t in {t for t, _ in got} if (wm := self.topic_watermark(t)) is not None
        }
        # A datacenter whose heartbeats lag had its windows held open here (reconcile.py).
        closed_before_dc = {
            (t, dc): min(cb, hb - w - self.config.grace_ms)
            for t, cb in closed_before.items()
            for dc, hb in self.held_heartbeats().items()
            if dc != self.alias
        }
        heartbeats: dict[str, int] = {}
        for tp, part in got.items():
            self.high_watermarks[tp] = part.high_watermark
            top = self.watermarks.get(tp, 0)
            for h, _ in part.batches:
                top = max(top, min(h.max_timestamp, fetched_at))  # a future-dated record closes nothing early
            for h, b in part.committed():  # no marker, no record of an aborted transaction
                try:
                    if tp[0] == AUDIT_TOPIC:
                        for r in decode_batch(b)[1]:
                            if r.offset < self.offsets[tp]:
                                continue
                            self._audit_record(tp, r, events, rejected, gaps)
                    elif self._is_heartbeats(tp[0]):
                        for r in decode_batch(b)[1]:
                            if r.offset >= self.offsets[tp]:
                                self._heartbeat_record(tp, r, heartbeats, rejected)
                    else:
                        count_batch(self.alias, tp[0], w, h, b, counts, self.offsets[tp])
                except KafkaError as e:
                    if e.code != ErrorCode.CORRUPT_MESSAGE:
                        raise
                    # Counting past it would hide its records; re-reading it fails the same way.
                    raise FatalError(
                        f"{tp[0]}-{tp[1]}: the record batch at offset {h.base_offset} is corrupt ({e.message}); "
                        f"this tier stops counting at offset {self.offsets[tp]}"
                    ) from e
            if part.batches:
                moved[tp] = part.batches[-1][0].next_offset
            # the high watermark, not the LSO: an open transaction's records may still commit into
            # the windows of their creation times, so they stay open until it ends
            caught_up = moved.get(tp, self.offsets[tp]) >= part.high_watermark
            self.watermarks[tp] = max(top, fetched_at) if caught_up else top
        if not moved:
            return
        new = await self._commit(
            moved,
            {k: (v[0], v[1]) for k, v in counts.items()},
            events,
            rejected,
            gaps,
            closed_before,
            heartbeats,
            closed_before_dc,
        )
        if new is None:
            return
        for bad in rejected:  # logged once: after the round that skips them was committed
            if bad.reason in QUIET_REASONS:  # logged once per producer when found (_refuse)
                self.on_bad_event(self.alias, bad.reason)
                continue
            log.warning(
                "%s: rejected an event at %s-%d offset %d (%s): %r",
                self.alias,
                bad.topic,
                bad.partition,
                bad.offset,
                bad.reason,
                (bad.value or b"")[:200],
            )
            self.on_bad_event(self.alias, bad.reason)
        self.records_counted += sum(v[0] for v in counts.values())
        self.events_seen += len(events)
        self.rejected += len(rejected)

    def _refuse(
        self, tp: TopicPartition, r: Record, reason: str, kind: str, parsed: Any, rejected: list[Rejected]
    ) -> None:
        """Refuse an event (kept in audit_rejected, counted after the round's commit); the first one of
        each producer (datacenter and host: the mirror's hop for a gap) is logged."""
        rejected.append(Rejected(tp[0], tp[1], r.offset, reason, None if r.value is None else bytes(r.value)))
        if reason == "too many topics":
            return  # TopicLimit logged it
        if kind == "gap":
            dc, host = parsed.datacenter, f"mirror {parsed.hop}"
        else:
            dc, host = parsed["datacenter"], str(parsed.get("host") or "?")
        who = (reason, dc[:100], host[:100])
        if who in self._refused_producers or len(self._refused_producers) > MAX_PRODUCERS_LOGGED:
            return
        self._refused_producers.add(who)
        more = (
            " (further producers refused are not logged)" if len(self._refused_producers) > MAX_PRODUCERS_LOGGED else ""
        )
        log.error(
            "%s: refused %s %s event(s) from datacenter %r host %r (first at %s-%d offset %d): the audit "
            "requires events signed with audit.signing.key; further ones from it are counted in "
            "headwater_audit_bad_events{reason=%r}, not logged%s",
            self.alias,
            "unsigned" if reason == "unsigned" else "badly signed",
            kind,
            who[1],
            who[2],
            tp[0],
            tp[1],
            r.offset,
            reason,
            more,
        )

    def _heartbeat_record(
        self, tp: TopicPartition, r: Record, heartbeats: dict[str, int], rejected: list[Rejected]
    ) -> None:
        try:
            source, ts = parse_heartbeat(
                None if r.value is None else bytes(r.value), None if r.key is None else bytes(r.key)
            )
        except BadEvent as e:
            rejected.append(Rejected(tp[0], tp[1], r.offset, e.reason, None if r.value is None else bytes(r.value)))
            return
        heartbeats[source] = max(ts, heartbeats.get(source, ts))

    def _audit_record(
        self, tp: TopicPartition, r: Record, events: list[dict[str, Any]], rejected: list[Rejected], gaps: list[Gap]
    ) -> None:
        try:
            kind, parsed = parse_audit_record(r.value, self.config.window_ms)
        except BadEvent as e:
            rejected.append(Rejected(tp[0], tp[1], r.offset, e.reason, None if r.value is None else bytes(r.value)))
            return
        topic = parsed.topic if kind == "gap" else parsed["topic"]
        if not self.config.audited(topic):
            return
        tier = parsed.tier if kind == "gap" else parsed["tier"]
        reason = None
        if self.config.signing.required_for(kind, tier):
            signature = next((v for k, v in r.headers if k == HEADER_SIGNATURE), None)
            if signature is None:
                reason = "unsigned"
            elif not verify_event(r.value, signature, self.config.signing.keys):
                reason = "bad signature"
        if reason is None and not self.topic_limit.admit(topic):
            reason = "too many topics"
        if reason is not None:
            self._refuse(tp, r, reason, kind, parsed, rejected)
            return
        if kind == "gap":
            gaps.append(parsed)
        else:
            events.append(parsed)
