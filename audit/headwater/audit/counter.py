"""Counting one cluster's tier, and reading its ``__audit`` count events.

Reads raw record batches (no decoding where the header answers): a CreateTime batch whose first and
max timestamps fall in one window is counted from its header's record count under its first
record's ``origin.dc`` — one producer writes one batch, and a batch of our auditing producer shares
its origin. Any other batch is counted record by record from the origin headers; a record without
them is counted as unaudited (datacenter ``-``) at this cluster, by its timestamp.

Every fetch round's counts, events and the offsets reached go to the store in one transaction.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import defaultdict
from typing import Any

from headwater.audit.config import AuditConfig
from headwater.audit.store import UNAUDITED_DC, CountKey, Store
from headwater.client.admin import Admin
from headwater.client.audit import AUDIT_TOPIC, HEADER_CREATED, HEADER_DC
from headwater.client.consumer import Consumer
from headwater.client.errors import KafkaConnectionError, KafkaTimeoutError, OffsetOutOfRangeError
from headwater.client.raw import fetch_raw
from headwater.protocol.errors import KafkaError
from headwater.protocol.records.header import TIMESTAMP_TYPE_BIT, BatchHeader
from headwater.protocol.records.record import Record, decode_batch, first_record

log = logging.getLogger("headwater.audit.counter")

_EVENT_FIELDS = {"guid": str, "tier": str, "datacenter": str, "topic": str, "window_start": int, "count": int}
TIERS_FROM_EVENTS = ("producer", "warehouse")


def _origin(r: Record) -> tuple[str | None, int | None]:
    dc = created = None
    for k, v in r.headers:
        if k == HEADER_DC and v is not None:
            dc = v.decode("utf-8", "replace")
        elif k == HEADER_CREATED and v is not None:
            try:
                created = int(v)
            except ValueError:
                created = None
    return dc, created


def count_batch(
    alias: str, topic: str, window_ms: int, h: BatchHeader, batch: memoryview, counts: dict[CountKey, list[int]]
) -> None:
    """Add one batch's records to ``counts`` ((count, unaudited) per (topic, window, dc, tier))."""
    create_time = not h.attributes & TIMESTAMP_TYPE_BIT
    if create_time and h.base_timestamp // window_ms == h.max_timestamp // window_ms:
        first = first_record(batch)
        if first is not None:
            dc, created = _origin(first)
            if dc is not None and created is not None and created // window_ms == h.base_timestamp // window_ms:
                c = counts[(topic, created // window_ms * window_ms, dc, alias)]
                c[0] += h.records_count
                return
    _, records = decode_batch(batch)
    for r in records:
        dc, created = _origin(r)
        if dc is None or created is None:
            c = counts[(topic, r.timestamp // window_ms * window_ms, UNAUDITED_DC, alias)]
            c[0] += 1
            c[1] += 1
        else:
            counts[(topic, created // window_ms * window_ms, dc, alias)][0] += 1


def parse_event(raw: bytes | None) -> dict[str, Any] | None:
    """A count event, or None when it is malformed (the caller counts it as rejected)."""
    try:
        e = json.loads(raw or b"")
    except ValueError:
        return None
    if not isinstance(e, dict):
        return None
    for name, kind in _EVENT_FIELDS.items():
        value = e.get(name)
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                return None
        elif not isinstance(value, str) or not value:
            return None
    if e["tier"] not in TIERS_FROM_EVENTS or e["count"] < 0:
        return None
    return e


class TierCounter:
    """Counts one cluster (alias) into the store, resuming from the stored offsets."""

    def __init__(self, alias: str, bootstrap: str, config: AuditConfig, store: Store) -> None:
        self.alias = alias
        self.config = config
        self.store = store
        self.admin = Admin(bootstrap, client_id="headwater-audit")
        self.cluster = self.admin.cluster
        self.offsets: dict[tuple[str, int], int] = {}
        self.high_watermarks: dict[tuple[str, int], int] = {}
        self.records_counted = 0
        self.events_seen = 0
        self.rejected = 0
        self._topics_at = 0.0

    @property
    def lag(self) -> int:
        return sum(max(hw - self.offsets.get(tp, 0), 0) for tp, hw in self.high_watermarks.items())

    async def run(self, stop: asyncio.Event) -> None:
        self.offsets = await asyncio.to_thread(self.store.offsets, self.alias)
        backoff = 0.2
        while not stop.is_set():
            try:
                if time.monotonic() - self._topics_at > 5 or not self.offsets:
                    await self._discover()
                if not self.offsets:
                    await asyncio.sleep(1)
                    continue
                await self._round()
                backoff = 0.2
            except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as e:
                log.warning("%s: %s; retrying in %.1fs", self.alias, e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        await self.admin.close()

    async def _discover(self) -> None:
        topics = await self.admin.list_topics(include_internal=True)
        consumer = Consumer("", cluster=self.cluster)
        for t in topics:
            if t != AUDIT_TOPIC and not self.config.audited(t):
                continue
            for p in await consumer.partitions_for(t):
                if (t, p) not in self.offsets:
                    self.offsets[(t, p)] = await consumer.earliest_offset(t, p)
        self._topics_at = time.monotonic()

    async def _round(self) -> None:
        requests = [(t, p, o) for (t, p), o in self.offsets.items()]
        try:
            got, failed = await fetch_raw(self.cluster, requests, max_wait_ms=self.config.fetch_max_wait_ms)
        except OffsetOutOfRangeError as e:
            consumer = Consumer("", cluster=self.cluster)
            tp = (e.topic, e.partition)
            self.offsets[tp] = await consumer.earliest_offset(*tp)
            log.warning("%s: %s-%d: offset out of range: counting resumes at the log start", self.alias, *tp)
            return
        if failed:
            await self.cluster.refresh({t for t, _ in failed})
        w = self.config.window_ms
        counts: dict[CountKey, list[int]] = defaultdict(lambda: [0, 0])
        events: list[dict[str, Any]] = []
        rejected = 0
        moved: dict[tuple[str, int], int] = {}
        for tp, part in got.items():
            self.high_watermarks[tp] = part.high_watermark
            if not part.batches:
                continue
            for h, b in part.batches:
                if h.is_control:
                    continue
                if tp[0] == AUDIT_TOPIC:
                    for r in decode_batch(b)[1]:
                        event = parse_event(r.value)
                        if event is None:
                            rejected += 1
                            log.warning(
                                "%s: rejected a malformed count event at %s-%d offset %d: %r",
                                self.alias,
                                *tp,
                                r.offset,
                                (r.value or b"")[:200],
                            )
                        elif self.config.audited(event["topic"]):
                            events.append(event)
                else:
                    count_batch(self.alias, tp[0], w, h, b, counts)
            moved[tp] = part.batches[-1][0].next_offset
        if not moved:
            return
        now = int(time.time() * 1000)
        closed_before = now - w - self.config.grace_ms
        await asyncio.to_thread(
            self.store.apply,
            self.alias,
            moved,
            {k: (v[0], v[1]) for k, v in counts.items()},
            now,
            closed_before,
            events,
            rejected,
        )
        self.offsets.update(moved)
        self.records_counted += sum(v[0] for v in counts.values())
        self.events_seen += len(events)
        self.rejected += rejected
