"""Audit instrumentation for producers (ARCHITECTURE.md, "Audit"; the paper's auditing of counts).

:class:`AuditingProducer` wraps a :class:`~headwater.client.Producer`. Each record it sends gets three
headers — ``origin.host``, ``origin.dc`` and ``origin.created`` (creation time, ms since the epoch,
as a decimal string) — and is counted per (topic, window), ``window = created // window_ms``, when the
broker *acknowledges* it (a failed record is not counted). Once a window has ended and none of its
records are still in flight, a count event is published (JSON, key = the topic) to the audit topic::

    {"guid": "...", "tier": "producer", "datacenter": "dc1", "host": "web-7",
     "application": "frontend", "topic": "page-views",
     "window_start": 1700000000000, "window_end": 1700000060000, "count": 1234}

:meth:`AuditingProducer.close` flushes the records, then publishes every remaining count. A record
acknowledged after its window's event went out (long retries) is reported in a further event for the
same window, so the events of a window always add up to exactly what was acknowledged; consumers
de-duplicate events by ``guid``. An event whose send failed is sent again *as it was* (same guid and
count): the failed send may have reached the broker (its acknowledgement lost), and the audit then
sees the same event twice and counts it once. Auditing is on by default; ``audit=False`` makes the wrapper a plain
pass-through. Records already carrying ``origin.created`` keep their origin headers (a re-producer such
as the mirror should pass ``audit=False``: it is not the producer tier).

Signed events (``signing_key``, the audit service's ``audit.signing.key``; docs/audit.md): each event
record carries the header ``audit.signature`` = ``hmac-sha256=`` + the hex HMAC-SHA256 of the
record's value (the event's exact JSON bytes) under the key. The signature covers the guid, so a
replayed event is one the audit already de-duplicates; the key is shared by every audited producer
and the audit service (a holder can sign any event: keep it off other hosts). Without a key events
go unsigned, as before, and an audit service that requires signatures refuses them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from headwater.client.producer import Headers, Producer, RecordFuture, RecordMetadata
from headwater.client.record_future import BatchOutcome, SyncRecordFuture
from headwater.client.sync import SyncProducer
from headwater.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("headwater.client.audit")

__all__ = [
    "AUDIT_TOPIC",
    "HEADER_CREATED",
    "HEADER_DC",
    "HEADER_HOST",
    "HEADER_SIGNATURE",
    "AuditingProducer",
    "SigningKeyError",
    "SyncAuditingProducer",
    "count_event",
    "sign_event",
    "signing_key",
    "verify_event",
]

AUDIT_TOPIC = "__audit"
HEADER_HOST = "origin.host"
HEADER_DC = "origin.dc"
HEADER_CREATED = "origin.created"
HEADER_SIGNATURE = "audit.signature"
SIGNATURE_PREFIX = b"hmac-sha256="
MIN_SIGNING_KEY_BYTES = 16  # HMAC-SHA256 takes any length; a short shared key is guessable offline
DEFAULT_WINDOW_MS = 60_000

WindowKey = tuple[str, int]  # (topic, window number)
#: The origin headers of one millisecond's records of one topic: (the millisecond, the topic, the
#: headers origin.host/dc/created, what they add to a record's size, the largest record size a
#: request takes). A plain tuple: unpacked once per record, cheaper than a NamedTuple's attributes.
_Stamp = tuple[int, str, Headers, int, int]
F = TypeVar("F")


def count_event(
    *,
    topic: str,
    window_start: int,
    window_ms: int,
    count: int,
    datacenter: str,
    host: str,
    application: str,
    tier: str = "producer",
    guid: str | None = None,
) -> dict[str, Any]:
    """One count event as ARCHITECTURE.md ("Audit") defines it."""
    return {
        "guid": guid or uuid.uuid4().hex,
        "tier": tier,
        "datacenter": datacenter,
        "host": host,
        "application": application,
        "topic": topic,
        "window_start": window_start,
        "window_end": window_start + window_ms,
        "count": count,
    }


class SigningKeyError(ValueError):
    """An ``audit.signing.key`` we cannot use; names the property, never the key."""


def signing_key(value: str | bytes | None, prop: str = "audit.signing.key") -> bytes | None:
    """The key ``value`` stands for (``file:/path``, ``env:NAME`` or the key itself; bytes as they are),
    at least 16 bytes; None for None."""
    if value is None:
        return None
    if isinstance(value, bytes):
        key = value
    else:
        from headwater.security import SecurityConfigError, resolve_secret

        try:
            key = (resolve_secret(value, prop) or "").encode()
        except SecurityConfigError as e:
            raise SigningKeyError(str(e)) from None
    if len(key) < MIN_SIGNING_KEY_BYTES:
        raise SigningKeyError(f"{prop}: shorter than {MIN_SIGNING_KEY_BYTES} bytes")
    return key


_resolve_key = signing_key  # AuditingProducer's argument has the function's name


def sign_event(value: bytes, key: bytes) -> bytes:
    """The ``audit.signature`` header value of an event record whose value is ``value``."""
    return SIGNATURE_PREFIX + hmac.new(key, value, hashlib.sha256).hexdigest().encode()


def verify_event(value: bytes | None, signature: bytes | None, keys: Sequence[bytes]) -> bool:
    """Whether ``signature`` (an ``audit.signature`` header) signs ``value`` under one of ``keys``
    (compared in constant time)."""
    if value is None or signature is None:
        return False
    return any(hmac.compare_digest(bytes(signature), sign_event(bytes(value), k)) for k in keys)


class AuditingProducer:
    """A :class:`Producer` that stamps origin headers and reports acknowledged counts per window.

    Either wraps ``producer`` (which it then closes too) or builds one from ``bootstrap`` and
    ``producer_kwargs``. Same ``send`` / ``send_and_wait`` / ``flush`` / ``close`` as Producer.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] | None = None,
        *,
        producer: Producer | None = None,
        audit: bool = True,
        audit_topic: str = AUDIT_TOPIC,
        window_ms: int = DEFAULT_WINDOW_MS,
        datacenter: str = "",
        host: str | None = None,
        application: str = "",
        publish_interval_ms: int | None = None,
        signing_key: str | bytes | None = None,
        **producer_kwargs: Any,
    ) -> None:
        if producer is None:
            if bootstrap is None:
                raise ValueError("give bootstrap or producer")
            producer = Producer(bootstrap, **producer_kwargs)
        if window_ms <= 0:
            raise ValueError("window_ms must be positive")
        self._signing_key = _resolve_key(signing_key)  # SigningKeyError (a ValueError) before anything starts
        self.producer = producer
        self.enabled = audit
        self.audit_topic = audit_topic
        self.window_ms = window_ms
        self.datacenter = datacenter
        self.host = host or socket.gethostname()
        self.application = application
        self.publish_interval = (publish_interval_ms or min(window_ms, 1000)) / 1000.0
        # Counted per batch, not per record: the producer tells this object (its batch_counter) of
        # each batch it opens and how the batch ended; an acknowledged batch's records are counted by
        # their timestamps, which are their origin.created (stamp() builds it from the timestamp), so
        # nothing is done per record. The exception, a record that came with an origin.created of
        # another window than its timestamp's, moves one count from the one window to the other
        # (_corrections, noted under the accumulator's lock while the batch is open). _lock guards
        # _open, _corrections and _counts (the producer's threads and the loop thread use them).
        self._lock = threading.Lock()
        self._open: dict[BatchOutcome, WindowKey] = {}  # batches not settled: their first record's window
        self._corrections: dict[BatchOutcome, Counter[WindowKey]] = {}
        self._counts: Counter[WindowKey] = Counter()  # acknowledged, not yet published
        # a transactional producer (transactional_id): acknowledged in the open transaction; its
        # events are written in the transaction at commit_transaction, dropped by abort_transaction
        self.transactional = getattr(producer, "transaction", None) is not None
        self._txn_counts: Counter[WindowKey] = Counter()
        self._fixed_headers = ((HEADER_HOST, self.host.encode()), (HEADER_DC, self.datacenter.encode()))
        self._fixed_size = sum(len(k) + len(v) + 4 for k, v in self._fixed_headers)
        # The origin headers of the current millisecond and topic, built once and shared by its records
        # (read and replaced as one object, from any thread)
        self._stamp: _Stamp = (-1, "", (), 0, 0)
        self._recent: list[object] = [None] * 128  # see _new_stamp
        self._recent_at = 0
        if audit:
            if getattr(producer, "batch_counter", None) is not None:
                raise ValueError("the producer is already counted by another AuditingProducer")
            producer.batch_counter = self
        self._published: Counter[WindowKey] = Counter()  # totals published so far
        self._unsent: list[tuple[WindowKey, dict[str, Any]]] = []  # events whose send failed: re-sent as they are
        self._publisher: asyncio.Task[None] | None = None
        self._publish_lock: asyncio.Lock | None = None
        self._closed = False

    async def __aenter__(self) -> AuditingProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        await self.producer.start()
        self._ensure_publisher()

    def _ensure_publisher(self) -> None:
        if self.transactional:  # events go out in the transactions they count (commit_transaction)
            return
        if self.enabled and self._publisher is None and not self._closed:
            self._publish_lock = asyncio.Lock()
            self._publisher = asyncio.create_task(self._publish_loop(), name="headwater-audit-publisher")

    # -- sending ---------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        headers: Iterable[tuple[str, Any]] = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordFuture:
        """Queue one record (see :meth:`Producer.send`); counted when its future succeeds."""
        if not self.enabled or topic == self.audit_topic:
            return await self.producer.send(topic, value, key, headers, partition, timestamp_ms)
        self._ensure_publisher()
        p = self.producer
        kb, vb, hdrs, ts, size = p.prepare(value, key, headers, timestamp_ms)
        hdrs, ts, size, window = self.stamp(topic, hdrs, ts, size, timestamp_ms is None)
        future_class: Callable[[BatchOutcome, int], RecordFuture] = RecordFuture
        if window[1] != ts // self.window_ms:
            future_class = self.moved(RecordFuture, ts, window)
        fut = p.try_append(topic, kb, vb, hdrs, ts, size, partition, future_class)
        if fut is None:
            fut = await p.append(topic, kb, vb, hdrs, ts, size, partition, future_class)
        return fut

    def stamp(
        self, topic: str, hdrs: Headers, ts: int, size: int, default_ts: bool
    ) -> tuple[Headers, int, int, WindowKey]:
        """Add the origin headers to a prepared record (unless it has them): (headers, timestamp,
        size, its window). Any thread may call it.

        A record without headers (the common case) takes the millisecond's headers as they are: one
        tuple per millisecond and topic, not one per record. The window is the record's timestamp's
        unless it came with its own origin.created (see :meth:`moved`)."""
        if not hdrs:
            ms, stamped, headers, extra, limit = self._stamp
            if ms != ts or stamped != topic:
                ms, stamped, headers, extra, limit = self._stamp = self._new_stamp(topic, ts)
            size += extra
            if size > limit:
                raise _too_large(size)
            return headers, ts, size, (topic, ts // self.window_ms)
        created = _created(hdrs)
        if created is None:
            ms, stamped, headers, extra, limit = self._stamp
            if ms != ts or stamped != topic:
                ms, stamped, headers, extra, limit = self._stamp = self._new_stamp(topic, ts)
            size += extra
            if size > limit:
                raise _too_large(size)
            return (*hdrs, *headers), ts, size, (topic, ts // self.window_ms)
        if default_ts:
            ts = created
        return hdrs, ts, size, (topic, created // self.window_ms)

    def _new_stamp(self, topic: str, ms: int) -> _Stamp:
        created = (HEADER_CREATED, str(ms).encode())
        headers = (*self._fixed_headers, created)
        # Held from a long-lived list as well (the last 64 milliseconds' stamps), not only from the
        # stamp and the records: the garbage collector then finds both tuples reachable where they
        # are, ahead of the records that share them, and stops tracking them before it looks at
        # those records, which it then stops tracking too (a tuple is untracked only once everything
        # in it is). Held only from young objects (the records; the stamp replaced before the next
        # collection), they were looked at after the records: up to 1 record in 4 stayed tracked and
        # every collection walked it again (+0.1-0.25 us per record).
        at = self._recent_at
        self._recent[at], self._recent[at + 1] = created, headers
        self._recent_at = (at + 2) % len(self._recent)
        extra = self._fixed_size + len(HEADER_CREATED) + len(created[1]) + 4
        return (ms, topic, headers, extra, self.producer.max_request_size - 61)  # 61: the batch header

    def moved(
        self, future_class: Callable[[BatchOutcome, int], F], ts: int, window: WindowKey
    ) -> Callable[[BatchOutcome, int], F]:
        """The future class for a record of timestamp ``ts`` counted in ``window`` (its own
        origin.created) rather than in its timestamp's: appending it notes the move in its batch."""

        def make(outcome: BatchOutcome, index: int) -> F:
            # under the accumulator's lock, the batch open: noted before the batch can settle
            with self._lock:
                if outcome in self._open:
                    moves = self._corrections.setdefault(outcome, Counter())
                    moves[(window[0], ts // self.window_ms)] -= 1
                    moves[window] += 1
            return future_class(outcome, index)

        return make

    # -- the producer's batch counter (BatchCounter) ---------------------------------------------

    def opened(self, topic: str, outcome: BatchOutcome, timestamp: int) -> bool:
        if topic == self.audit_topic:
            return False
        with self._lock:
            self._open[outcome] = (topic, timestamp // self.window_ms)
        return True

    def acknowledged(self, topic: str, outcome: BatchOutcome, timestamps: list[int]) -> None:
        w = self.window_ms
        first, last = min(timestamps), max(timestamps)
        by_window: Counter[WindowKey] | None = None
        if first // w != last // w:  # the batch straddles a window's end (rare: per record then)
            by_window = Counter((topic, ts // w) for ts in timestamps)
        with self._lock:
            counts = self._txn_counts if self.transactional else self._counts
            self._open.pop(outcome, None)
            if by_window is None:
                counts[(topic, first // w)] += len(timestamps)
            else:
                counts.update(by_window)
            moves = self._corrections.pop(outcome, None)
            if moves:
                counts.update(moves)
                for k in [k for k, n in counts.items() if n == 0]:
                    del counts[k]

    def failed(self, outcome: BatchOutcome) -> None:
        with self._lock:
            self._open.pop(outcome, None)
            self._corrections.pop(outcome, None)

    async def send_and_wait(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        headers: Iterable[tuple[str, Any]] = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        fut = await self.send(topic, value, key, headers, partition, timestamp_ms)
        return await fut

    async def flush(self, timeout: float | None = None) -> None:
        await self.producer.flush(timeout)

    # -- transactions (a producer with transactional_id) -------------------------------------------

    async def init_transactions(self) -> None:
        await self.producer.init_transactions()

    def begin_transaction(self) -> None:
        self.producer.begin_transaction()
        with self._lock:
            self._txn_counts.clear()

    async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
        await self.producer.send_offsets_to_transaction(offsets, group_id)

    async def commit_transaction(self) -> None:
        """Flush, write the transaction's count events *in the transaction*, commit. The events
        become visible to a read_committed reader exactly when the records they count do, and are
        aborted with them: the audit's producer tier counts committed records only."""
        p = self.producer
        await p.flush()
        with self._lock:
            counts = Counter(self._txn_counts)
        futures = []
        if self.enabled:
            for k, n in sorted(counts.items()):
                if n > 0:
                    value, headers = self._event_record(k, n)
                    futures.append(await p.send(self.audit_topic, value, k[0], headers))
        await p.commit_transaction()
        for f in futures:
            await f  # settled by the commit's flush (a failure raised from commit_transaction)
        with self._lock:
            self._published.update(counts)
            self._txn_counts.clear()

    async def abort_transaction(self) -> None:
        """Abort: the transaction's records are not counted (read_committed readers never see them)."""
        await self.producer.abort_transaction()
        with self._lock:
            self._txn_counts.clear()

    def _event_record(self, k: WindowKey, n: int) -> tuple[bytes, Headers]:
        event = count_event(
            topic=k[0],
            window_start=k[1] * self.window_ms,
            window_ms=self.window_ms,
            count=n,
            datacenter=self.datacenter,
            host=self.host,
            application=self.application,
        )
        value = json.dumps(event).encode()
        signed = ((HEADER_SIGNATURE, sign_event(value, self._signing_key)),) if self._signing_key else ()
        return value, signed

    # -- counts and events -----------------------------------------------------------------------

    def counts(self) -> dict[WindowKey, int]:
        """Acknowledged records per (topic, window number), published or not."""
        with self._lock:
            total = Counter(self._published)
            total.update(self._counts)
        for k, event in self._unsent:
            total[k] += int(event["count"])
        return dict(total)

    async def publish(self, *, all_windows: bool = False) -> int:
        """Publish the count events of closed windows (all of them with ``all_windows``); events sent."""
        if self._publish_lock is None:
            self._publish_lock = asyncio.Lock()
        async with self._publish_lock:
            now_window = int(time.time() * 1000) // self.window_ms
            with self._lock:
                # a window is in flight from the first window of a topic's oldest batch not settled on
                # (records of one batch are in that window or later ones), and where a move goes
                first_open: dict[str, int] = {}
                for topic, w in self._open.values():
                    first_open[topic] = min(w, first_open.get(topic, w))
                moved = {k for moves in self._corrections.values() for k in moves}
                ready = [
                    (k, self._counts.pop(k))
                    for k, n in list(self._counts.items())
                    if n > 0
                    and (
                        all_windows or (k[1] < now_window and k[1] < first_open.get(k[0], k[1] + 1) and k not in moved)
                    )
                ]
            events, self._unsent = self._unsent, []
            for k, n in ready:
                events.append(
                    (
                        k,
                        count_event(
                            topic=k[0],
                            window_start=k[1] * self.window_ms,
                            window_ms=self.window_ms,
                            count=n,
                            datacenter=self.datacenter,
                            host=self.host,
                            application=self.application,
                        ),
                    )
                )
            if not events:
                return 0
            sends: list[tuple[WindowKey, dict[str, Any], RecordFuture | BaseException]] = []
            for k, event in events:
                try:
                    value = json.dumps(event).encode()
                    signed = ((HEADER_SIGNATURE, sign_event(value, self._signing_key)),) if self._signing_key else ()
                    fut = await self.producer.send(self.audit_topic, value, k[0], signed)
                    sends.append((k, event, fut))
                except Exception as e:
                    sends.append((k, event, e))
            sent = 0
            for k, event, f in sends:
                error: BaseException | None = f if isinstance(f, BaseException) else None
                if error is None:
                    assert not isinstance(f, BaseException)
                    try:
                        await f
                    except Exception as e:
                        error = e
                if error is None:
                    self._published[k] += int(event["count"])
                    sent += 1
                else:  # keep the event: the next round sends it again, with the same guid
                    log.warning("audit event %s for %s window %d not published: %s", event["guid"], k[0], k[1], error)
                    self._unsent.append((k, event))
            return sent

    async def _publish_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.publish_interval)
            try:
                await self.publish()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # pragma: no cover - publish() keeps its own errors
                log.warning("audit publishing failed: %s", e)

    async def close(self, timeout: float | None = None) -> None:
        """Flush the records, publish every remaining count, close the producer."""
        if self._closed:
            return
        try:
            with contextlib.suppress(Exception):
                await self.producer.flush(timeout)
            if self._publisher is not None:
                self._publisher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._publisher
            self._closed = True
            if self.enabled:
                for _ in range(3):
                    await self.publish(all_windows=True)
                    if not self._counts and not self._unsent:
                        break
                if self._counts or self._unsent:
                    log.error(
                        "audit counts not published at close: %s",
                        dict(Counter(self._counts) + Counter({k: int(e["count"]) for k, e in self._unsent})),
                    )
        finally:
            self._closed = True
            await self.producer.close(timeout)


class SyncAuditingProducer(SyncProducer):
    """Blocking facade of :class:`AuditingProducer` (same arguments; the API of SyncProducer).

    The same path as SyncProducer's: the calling thread stamps the origin headers and appends the
    record; the accumulator counts its batch when the batch settles (nothing per record).
    """

    producer_class = AuditingProducer

    def __init__(self, bootstrap: str | Sequence[str] | None = None, **kwargs: Any) -> None:
        super().__init__(bootstrap, **kwargs)
        self.auditing: AuditingProducer = self.producer  # type: ignore[assignment]
        self._accumulator = self.auditing.producer
        self._run(_async(self.auditing._ensure_publisher))

    def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        headers: Iterable[tuple[str, Any]] = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> SyncRecordFuture:
        """Queue one record with its origin headers; counted when its batch is acknowledged."""
        a = self.auditing
        p = self._accumulator
        future_class: Any = SyncRecordFuture
        try:
            kb, vb, hdrs, ts, size = p.prepare(value, key, headers, timestamp_ms)
            ms, stamped, stamp, extra, limit = a._stamp
            if hdrs or ms != ts or stamped != topic:
                # not the common case (it follows): headers of its own, another millisecond or topic,
                # the audit topic or auditing off (no stamp is made for those: the common case
                # needs no check of them)
                if a.enabled and topic != a.audit_topic:
                    hdrs, ts, size, window = a.stamp(topic, hdrs, ts, size, timestamp_ms is None)
                    if window[1] != ts // a.window_ms:
                        future_class = a.moved(SyncRecordFuture, ts, window)
            else:  # stamp()'s common case, inline (it runs once per record): this millisecond's headers
                size += extra
                if size > limit:
                    raise _too_large(size)
                hdrs = stamp
            fut = p.try_append(topic, kb, vb, hdrs, ts, size, partition, future_class)
            if fut is None:
                fut = self._append_waiting(topic, kb, vb, hdrs, ts, size, partition, future_class)
        except BufferError:
            raise
        except Exception as e:  # delivered through the future, like every other error
            return SyncRecordFuture.failed(self._lt.loop, topic, e)
        return fut

    def send_many(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Iterable[tuple[str, Any]] = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
        *,
        per_record: bool = True,
    ) -> list[SyncRecordFuture]:
        """:meth:`SyncProducer.send_many` with the origin headers: one stamp for all the records
        (they share the headers and the timestamp); counted when their batches are acknowledged."""
        a = self.auditing
        if not a.enabled or topic == a.audit_topic:
            return super().send_many(topic, values, keys, headers, partition, timestamp_ms, per_record=per_record)
        try:
            hdrs = self._accumulator.serialize_headers(headers)
            ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
            stamped, ts, _, _ = a.stamp(topic, hdrs, ts, 0, timestamp_ms is None)
        except Exception as e:
            return [SyncRecordFuture.failed(self._lt.loop, topic, e) for _ in values]
        if _created(hdrs) is not None:  # the caller's own origin.created: each record counted as send() does
            return [
                self.send(topic, v, k, stamped, partition, ts)
                for k, v in zip(keys if keys is not None else [None] * len(values), values, strict=True)
            ]
        return super().send_many(topic, values, keys, stamped, partition, ts, per_record=per_record)

    def counts(self) -> dict[WindowKey, int]:
        return self._run(_async(self.auditing.counts))


def _too_large(size: int) -> KafkaError:
    return KafkaError(
        ErrorCode.MESSAGE_TOO_LARGE,
        f"a record of about {size} bytes with its origin headers is larger than max_request_size",
    )


async def _async(fn: Any) -> Any:
    return fn()


def _created(headers: Sequence[tuple[str, Any]]) -> int | None:
    for k, v in headers:
        if k == HEADER_CREATED and v is not None:
            raw = v.decode() if isinstance(v, bytes | bytearray) else str(v)
            with contextlib.suppress(ValueError):
                return int(raw)
    return None
