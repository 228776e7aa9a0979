"""One source partition's copier: fetch from the source leader, produce into the target.

::

    fetch (raw, read_committed unless ``isolation.level`` says otherwise) from the source leader, ahead of the produce (fetch_ahead.py: the
    next fetches are on the wire while these batches are produced; parts taken in offset order)
      -> the batches of aborted transactions and the control batches (markers) left out
         (headwater.client.raw.committed_batches); the offsets move past them all the same
      -> fast path: the complete batches as they are (producer state of idempotent and
         transactional batches reset), produced raw with acks=all to the SAME partition number
      -> re-partitioning path (partition counts differ, or a test fault is set): records decoded
         and produced with acks=all to murmur2(key) % n (the Java client's choice; a null key keeps
         its source partition modulo n), keys / values / headers / CreateTime kept
      -> provenance path (``provenance.header.enabled``, and the ``heartbeats`` topic under
         IdentityReplicationPolicy): records decoded and produced to the SAME partition, each with
         the header ``headwater.provenance`` = the aliases of the clusters it was copied from, in
         order (``dc1``, then ``dc1,dc2``); a record whose header already names the flow's target,
         or a heartbeat written in the target, is not copied (it came from there: active/active
         without loops). Offsets change (records are left out), so this path writes no offset syncs.
      -> only when the target acknowledged every batch of the fetch does the partition's
         acknowledged offset (``next_offset``) move past them.

The :class:`Copier` holds the partition's state (next offset, committed offset, the target offset
after its last acknowledged append); :meth:`Copier.run` is its loop. The mirror
(:mod:`headwater.mirror.mirror`) starts and stops copiers and commits their offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from headwater.client.cluster import Cluster
from headwater.client.consumer import Consumer
from headwater.client.errors import (
    KafkaAuthenticationError,
    KafkaConnectionError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    UnknownTopicError,
)
from headwater.client.partitioner import murmur2, to_positive
from headwater.client.raw import as_plain_batch, produce_raw
from headwater.mirror.config import HEARTBEATS_TOPIC, MirrorConfig
from headwater.mirror.copies import ScanBudget, TargetCopies, scan_target, skip_copied
from headwater.mirror.fetch_ahead import FetchAhead
from headwater.mirror.heartbeats import decode_heartbeat
from headwater.mirror.metrics import MirrorMetrics
from headwater.mirror.plan import TopicPlan
from headwater.protocol.errors import DecodeError, ErrorCode, KafkaError
from headwater.protocol.records.header import ATTRIBUTES_OFFSET, TIMESTAMP_TYPE_BIT, BatchHeader
from headwater.protocol.records.record import Buffer, Record, RecordInput, decode_batch, encode_batch
from headwater.service.supervisor import FatalError, Unit

if TYPE_CHECKING:
    from headwater.mirror.mirror import FlowState

__all__ = ["STUCK_AFTER_S", "Copier", "TopicPartition", "as_target_batch", "batch_span", "is_dense"]

log = logging.getLogger("headwater.mirror")

TopicPartition = tuple[str, int]
BACKOFF_MAX = 5.0
#: consecutive failed fetches retried quietly (INFO) before the failure goes to the supervisor
_RETRIES_BEFORE_FAILING = 8
#: a copier that has neither fetched nor delivered for this long is reported stuck by /healthz
STUCK_AFTER_S = 120.0
_LAST_OFFSET_DELTA = ATTRIBUTES_OFFSET + 2
#: the clusters a record was copied from, in order ("dc1,dc2"): provenance.header.enabled
PROVENANCE_HEADER = "headwater.provenance"


def batch_span(batch: bytes | memoryview) -> int:
    """How many offsets a batch takes in the log (last offset delta + 1)."""
    return int.from_bytes(batch[_LAST_OFFSET_DELTA : _LAST_OFFSET_DELTA + 4], "big", signed=True) + 1


#: answers that say the produce was NOT appended: retried at once, without looking for it in the target
NOT_APPENDED_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_FOR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_ENOUGH_REPLICAS,  # checked before the append (unlike ..._AFTER_APPEND)
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)
#: answers retrying cannot fix: the partition's copier stops (FatalError: ERROR, counted, /healthz 503)
FATAL_PRODUCE_ERRORS = frozenset(
    {
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.CORRUPT_MESSAGE,  # batches are dense (re-encoded when cleaned): the source data is corrupt
        ErrorCode.INVALID_TIMESTAMP,
        ErrorCode.INVALID_RECORD,  # a newer target's record validation (KIP-467)
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
        ErrorCode.INVALID_REQUIRED_ACKS,
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.POLICY_VIOLATION,
    }
)
#: fetch answers that mean "not allowed": raised to the supervisor at once, never retried quietly
_REFUSALS = frozenset(
    {
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.SASL_AUTHENTICATION_FAILED,
    }
)


def _refused(e: BaseException) -> bool:
    return isinstance(e, KafkaAuthenticationError) or (isinstance(e, KafkaError) and e.code in _REFUSALS)


#: at most this many scans (one a second) for the batches of an unanswered produce
_SCAN_ROUNDS_MAX = 15


def _not_appended(e: Exception) -> bool:
    return isinstance(e, KafkaError) and e.code in NOT_APPENDED_ERRORS


@contextlib.contextmanager
def _source_batches_decode(tp: TopicPartition, batches: list[tuple[BatchHeader, memoryview]]) -> Iterator[None]:
    """A source batch that cannot be decoded (bad CRC, malformed records, an unknown codec) will
    not decode on a retry either: FatalError stops the partition, naming the offsets."""
    try:
        yield
    except (KafkaError, DecodeError) as e:
        raise FatalError(
            f"a source batch of {tp[0]}-{tp[1]} between offsets {batches[0][0].base_offset} and "
            f"{batches[-1][0].last_offset} cannot be decoded: {e} (the partition stays stopped until the mirror "
            "restarts; inspect the source log)"
        ) from e


def is_dense(h: BatchHeader) -> bool:
    """Whether the batch's records fill its offset range (the log cleaner leaves gaps)."""
    return h.records_count == h.last_offset_delta + 1


def as_target_batch(h: BatchHeader, b: memoryview) -> bytes | memoryview | None:
    """A fetched batch as the fast path produces it, None when there is nothing to produce.

    A batch the source's log cleaner compacted keeps its offset range but lost records (offset
    gaps); a broker refuses such a batch from a producer (CORRUPT_MESSAGE), so it is decoded and
    re-encoded with dense offsets (same codec, timestamp type, timestamps, keys, values, headers),
    as MirrorMaker 2 re-produces records. Re-encoding is deterministic, so a copy made this way is
    still recognised in the target (:mod:`headwater.mirror.copies`). A batch the cleaner emptied
    is left out. Any other batch is produced as it is (producer state reset: :func:`as_plain_batch`).
    """
    if is_dense(h):
        return as_plain_batch(h, b)
    if h.records_count == 0:
        return None
    _, records = decode_batch(b)
    return encode_batch(
        [RecordInput(r.key, r.value, r.timestamp, r.headers) for r in records],
        compression=h.codec,
        timestamp_type=1 if h.attributes & TIMESTAMP_TYPE_BIT else 0,
    )


class Copier:
    """One owned source partition: its offsets and its copy loop."""

    def __init__(
        self,
        flow: FlowState,
        tp: TopicPartition,
        *,
        config: MirrorConfig,
        target: Cluster,
        metrics: MirrorMetrics,
        next_offset: int,
        committed: int,
        scan_budget: ScanBudget | None = None,
    ) -> None:
        self.flow = flow
        self.tp = tp
        self.config = config
        self.target = target
        self.metrics = metrics
        self.stop = asyncio.Event()
        self.next_offset = next_offset  # the source offset after everything the target acknowledged
        self.committed = committed  # what the group in ZooKeeper holds (-1: nothing yet)
        self.unit_name = f"{flow.flow.name} {tp[0]}-{tp[1]}"
        #: fast path: the target offset right after this copier's last acknowledged append (-1: unknown)
        self.target_end = -1
        #: fast path, after a change of owner: copies the previous owner made past the committed offset
        self.copies: TargetCopies | None = None
        self.resume_scan = False  # scan the target from target_end before the first fetch
        self.scan_budget = scan_budget or ScanBudget(config.resume_scan_max_bytes, config.resume_scan_total_max_bytes)
        self._holds_scan_slot = False  # while ``copies`` is held
        #: the fast path's last delivery: the source header of each produced batch, and the
        #: last produce attempt's base offset and batches (the offset syncs come from them)
        self._produced_from: list[BatchHeader] = []
        self._last_append: tuple[int, list[bytes | memoryview]] | None = None
        if flow.offset_syncs is not None:
            flow.offset_syncs.restart(*tp)
        self._told_reencoded = False
        #: the newest source high watermark seen (fetches taken, and the fetch-ahead's answers not taken yet)
        self.source_hw = -1
        #: the source's end offset as the flow's end-offset refresh last read it (lag.py; -1: not yet)
        self.end_offset = -1
        self._ahead: FetchAhead | None = None
        #: the source timestamp (ms) of the newest record the target acknowledged (-1: none yet)
        self.acked_timestamp = -1

    def set_end_offset(self, offset: int) -> None:
        """The source's end offset, read by the flow's end-offset refresh (lag.py), off the copy path."""
        self.end_offset = max(self.end_offset, offset)

    def lag(self) -> int:
        """Records in the source the target has not acknowledged: the source's end offset minus the
        offset after the last acknowledged record (not the fetch position). The end offset is the
        newest of what the flow's end-offset refresh read (every ``end.offsets.refresh.interval.ms``,
        whatever the copy is doing: a copier stuck producing into a stalled target fetches nothing
        more) and what any fetch saw (the fetch-ahead's answers included)."""
        hw = max(self.source_hw, self.end_offset)
        if self._ahead is not None:
            hw = max(hw, self._ahead.high_watermark)
        if hw < 0 or self.next_offset < 0:
            return 0
        return max(hw - self.next_offset, 0)

    def record_age_ms(self) -> float:
        """While the target lacks records: now minus the source timestamp of the last one it acknowledged."""
        if self.acked_timestamp <= 0 or self.lag() == 0:
            return 0.0
        return max(time.time() * 1000.0 - self.acked_timestamp, 0.0)

    @property
    def plan(self) -> TopicPlan:
        return self.flow.plans[self.tp[0]]

    def fast_path(self) -> bool:
        faults = self.config.drop_every or self.config.duplicate_every
        return self.plan.identity and not self.config.always_repartition and not faults and not self.filtered()

    def filtered(self) -> bool:
        """The provenance path: records checked (and stamped) one by one, kept in their partition."""
        heartbeats = self.tp[0] == HEARTBEATS_TOPIC and self.config.policy == "identity"
        return self.config.provenance_header or heartbeats

    def _came_from_target(self, r: Record) -> bool:
        target = self.flow.flow.target
        if self.tp[0] == HEARTBEATS_TOPIC and self.config.policy == "identity":
            try:
                if decode_heartbeat(r.key, r.value).source == target:
                    return True
            except ValueError:
                pass
        if self.config.provenance_header:
            route = next((v for k, v in r.headers if k == PROVENANCE_HEADER), None)
            if route is not None and target in bytes(route).decode(errors="replace").split(","):
                return True
        return False

    def _stamped(self, headers: Sequence[tuple[str, Buffer | None]]) -> Sequence[tuple[str, Buffer | None]]:
        if not self.config.provenance_header:
            return headers
        route = next((bytes(v) for k, v in headers if k == PROVENANCE_HEADER and v is not None), b"")
        here = self.flow.flow.source.encode()
        return [
            *(h for h in headers if h[0] != PROVENANCE_HEADER),
            (PROVENANCE_HEADER, route + b"," + here if route else here),
        ]

    async def reset_offset(self) -> int:
        """The source offset ``auto.offset.reset`` points at (earliest or latest)."""
        # latest: the LSO under read_committed, the high watermark under read_uncommitted -- with
        # ListOffsets v2+ (v0, offsets_before, has no isolation level: it answered the high watermark)
        consumer = Consumer("", cluster=self.flow.source, isolation_level=self.config.isolation)
        if self.config.auto_offset_reset == "earliest":
            return await consumer.earliest_offset(*self.tp)
        return await consumer.latest_offset(*self.tp)

    def describe(self) -> str:
        """What the copier was doing, for the supervisor's ERROR line."""
        return f"next offset {self.next_offset}, target end {self.target_end}"

    async def run(self, unit: Unit) -> None:
        """The copy loop, run by the mirror's supervisor: an exception that escapes is logged at
        ERROR, counted and the loop started again with backoff (the offsets live on in this
        object); :class:`FatalError` stops this partition only."""
        topic, partition = tp = self.tp
        backoff = 0.1
        failures = 0
        name = self.flow.flow.name
        ahead: FetchAhead | None = None
        labels = (name, topic, str(partition))
        self.metrics.lag.labels(*labels).set_function(self.lag)
        self.metrics.record_age.labels(*labels).set_function(self.record_age_ms)
        try:
            while not self.stop.is_set():
                if self.next_offset < 0:  # nothing committed: where auto.offset.reset points
                    self.next_offset = await self.reset_offset()
                try:
                    if self.resume_scan:
                        await self._resume_scan()
                    if ahead is not None and ahead.taken_to != self.next_offset:  # moved by someone else
                        await _dropped(ahead)
                        ahead = None
                    if ahead is None:  # (again) from the acknowledged offset
                        ahead = FetchAhead(
                            self.flow.fetcher.fetch,
                            tp,
                            self.next_offset,
                            self.max_buffered_bytes(),
                            in_flight=self.config.fetch_max_in_flight,
                            fetch_max_bytes=self.config.fetch_max_bytes,
                        )
                        ahead.start()
                        if self._ahead is not None:
                            self.source_hw = max(self.source_hw, self._ahead.high_watermark)
                        self._ahead = ahead
                    part = await ahead.next()
                    unit.progress()
                    self.source_hw = max(self.source_hw, part.end_offset)
                    failures, backoff = 0, 0.1
                    batches = part.batches
                    if not batches:
                        continue
                    data = part.committed()  # no marker, no aborted transaction's batch
                    if data and self.copies is not None:
                        data = self._skip_previous_copies(data)
                    if data:
                        await self._wait_for_lease()
                        await self._deliver(data)
                        unit.progress()
                    self.next_offset = ahead.taken_to = max(self.next_offset, batches[-1][0].next_offset)
                    ahead.release(sum(len(b) for _, b in batches))
                except OffsetOutOfRangeError:
                    # never a silent reset: a gap below the log start is reported, or stops this partition
                    await _dropped(ahead)
                    ahead = None
                    old = self.next_offset
                    if self.flow.gaps is not None:  # always, in Mirror.run
                        self.next_offset = await self.flow.gaps.out_of_range(topic, partition, old)
                    else:  # a flow built without one (unit fakes): auto.offset.reset, loudly
                        self.next_offset = await self.reset_offset()
                        log.error("%s: %s-%d offset %d is out of range: reset to %d", name, *tp, old, self.next_offset)
                except (KafkaConnectionError, KafkaTimeoutError, KafkaError, UnknownTopicError) as e:
                    # A leader moving, a broker restarting: retried here a few times; then the
                    # supervisor takes over (ERROR, counted, unhealthy while it backs off).
                    await _dropped(ahead)
                    ahead = None
                    if _refused(e):
                        # missing ACLs or credentials: no quick retry hides it; the supervisor
                        # logs it, counts it, reports it on /healthz and retries with backoff
                        log.error(
                            "%s: %s-%d: the source refused the mirror's principal: %s (check its ACLs and "
                            "credentials; docs/security.md lists what the mirror needs)",
                            name,
                            topic,
                            partition,
                            e,
                        )
                        raise
                    failures += 1
                    if failures > _RETRIES_BEFORE_FAILING:
                        raise
                    log.info("%s: %s-%d: %s; retrying in %.1fs", name, topic, partition, e, backoff)
                    try:
                        await asyncio.wait_for(self.stop.wait(), backoff)
                    except TimeoutError:
                        pass
                    backoff = min(backoff * 2, BACKOFF_MAX)
        except _Stopped:
            pass
        finally:
            await _dropped(ahead)
            self._drop_copies()

    def max_buffered_bytes(self) -> int:
        """``fetch.max.buffered.bytes`` (see :attr:`MirrorConfig.max_buffered_bytes`)."""
        return self.config.max_buffered_bytes

    async def _resume_scan(self) -> None:
        """What did the previous owner copy past the committed offset before it stopped? (Held
        until the first batch not found, within the mirror's scan budget.)"""
        if not self._holds_scan_slot:
            await self.scan_budget.acquire()
            self._holds_scan_slot = True
        copies, _ = await scan_target(
            self.target,
            self.plan.target_topic,
            self.tp[1],
            self.target_end,
            max_held_bytes=self.scan_budget.max_bytes,
        )
        self.resume_scan = False
        if copies is None:
            self.metrics.scans_abandoned.labels(self.flow.flow.name).inc()
            log.warning(
                "%s: %s-%d: more than resume.scan.max.bytes (%d) to scan in the target from offset %d; resuming "
                "at-least-once",
                self.flow.flow.name,
                *self.tp,
                self.scan_budget.max_bytes,
                self.target_end,
            )
        self.copies = copies or None
        if self.copies is None:
            self._drop_copies()

    def _drop_copies(self) -> None:
        self.copies = None
        if self._holds_scan_slot:
            self._holds_scan_slot = False
            self.scan_budget.release()

    def _skip_previous_copies(self, data: list[tuple[BatchHeader, memoryview]]) -> list[tuple[BatchHeader, memoryview]]:
        """Drop the leading batches the previous owner already copied into the target."""
        assert self.copies is not None
        produced = [(i, as_target_batch(h, b)) for i, (h, b) in enumerate(data)]
        kept = [(i, p) for i, p in produced if p is not None]
        matched, end = skip_copied([p for _, p in kept], self.copies)
        n = len(data) if matched == len(kept) else kept[matched][0]
        if n:
            self.target_end = max(self.target_end, end)
            records = sum(h.records_count for h, _ in data[:n])
            self.metrics.skipped.labels(self.flow.flow.name, self.tp[0]).inc(records)
            log.info(
                "%s: %s-%d: %d batch(es), %d record(s) from offset %d were already copied by the previous owner: skipped",
                self.flow.flow.name,
                *self.tp,
                n,
                records,
                data[0][0].base_offset,
            )
        if n < len(data):
            self._drop_copies()  # the rest was never copied: a prefix only, so matching is over
        return data[n:]

    async def _deliver(self, batches: list[tuple[BatchHeader, memoryview]]) -> None:
        """Produce the batches into the target until it acknowledged all of them (acks=all)."""
        plan = self.plan
        name = self.flow.flow.name
        topic = self.tp[0]
        with _source_batches_decode(self.tp, batches):
            produced = self._as_produced(batches) if self.fast_path() else self._repartition(plan, batches)
        if isinstance(produced, list):
            await self._produce_same_partition(plan.target_topic, self.tp[1], produced)
            self._offset_syncs(batches)
        else:
            for partition, payload in produced.items():
                await self._produce(plan.target_topic, partition, payload)
        count = sum(h.records_count for h, _ in batches)
        self.metrics.records.labels(name, topic).inc(count)
        size = sum(len(b) for _, b in batches)
        self.metrics.bytes.labels(name, topic).inc(size)
        self.flow.copied_bytes[self.tp] = self.flow.copied_bytes.get(self.tp, 0) + size  # placement's byte rates
        newest = max(h.max_timestamp for h, _ in batches)
        if newest > 0:
            now = time.time()
            self.metrics.latency.labels(name).observe(max(now - newest / 1000.0, 0.0))
            self.metrics.replication_latency.labels(name, topic, str(self.tp[1])).set(max(now * 1000.0 - newest, 0.0))
            self.acked_timestamp = max(self.acked_timestamp, newest)
            if topic == HEARTBEATS_TOPIC and self.flow.heartbeats is not None:
                self.flow.heartbeats.acked(name, newest)

    def _offset_syncs(self, batches: list[tuple[BatchHeader, memoryview]]) -> None:
        """The offset syncs of what the target just acknowledged (MM2's rule: see
        :mod:`headwater.mirror.checkpoints`): the batches of the last produce attempt, appended
        contiguously from its base offset."""
        syncs = self.flow.offset_syncs
        appended, self._last_append = self._last_append, None
        if syncs is None or appended is None or self.tp[0] == HEARTBEATS_TOPIC:
            return
        base, sent = appended
        headers = self._produced_from[len(self._produced_from) - len(sent) :]
        state = syncs.of(*self.tp)
        pairs: list[tuple[int, int]] = []
        down = base
        for h, b in zip(headers, sent, strict=True):
            n = batch_span(b)
            if is_dense(h):
                pairs.extend(state.dense_batch(h.base_offset, down, n))
            else:
                pairs.extend(state.sparse_batch(h.next_offset - 1, down + n - 1))
            down += n
        syncs.add(*self.tp, pairs)

    def _as_produced(self, batches: list[tuple[BatchHeader, memoryview]]) -> list[bytes | memoryview]:
        """The fast path's batches as the target accepts them (see :func:`as_target_batch`)."""
        out: list[bytes | memoryview] = []
        self._produced_from = []
        reencoded = 0
        for h, b in batches:
            produced = as_target_batch(h, b)
            if produced is not None:
                out.append(produced)
                self._produced_from.append(h)
            if not is_dense(h):
                reencoded += 1
        if reencoded:
            self.metrics.reencoded.labels(self.flow.flow.name, self.tp[0]).inc(reencoded)
            if not self._told_reencoded:
                self._told_reencoded = True
                log.info(
                    "%s: %s-%d: compacted batches (offset gaps left by the source's cleaner) are re-encoded with "
                    "dense offsets (the first from source offset %d)",
                    self.flow.flow.name,
                    *self.tp,
                    batches[0][0].base_offset,
                )
        return out

    def _repartition(self, plan: TopicPlan, batches: list[tuple[BatchHeader, memoryview]]) -> dict[int, bytes]:
        """Decode, choose each record's target partition as the Java client would, re-encode per
        partition (same codec and timestamp type as the source batch). Applies the test faults."""
        per_partition: dict[int, list[bytes]] = defaultdict(list)
        n = plan.target_partitions
        f = self.flow
        faults = self.tp[0] != HEARTBEATS_TOPIC  # the test faults hit data, not the mirror's own heartbeats
        filtered = self.filtered()
        same_partition = plan.identity and filtered
        for _, b in batches:
            header, records = decode_batch(b)
            out: dict[int, list[RecordInput]] = defaultdict(list)
            for r in records:
                if filtered and self._came_from_target(r):  # also when re-partitioned
                    self.metrics.looped.labels(f.flow.name).inc()
                    continue
                f.records_seen += faults
                copies = 1
                if faults and self.config.drop_every and f.records_seen % self.config.drop_every == 0:
                    self.metrics.dropped.labels(f.flow.name).inc()
                    continue
                if faults and self.config.duplicate_every and f.records_seen % self.config.duplicate_every == 0:
                    self.metrics.duplicated.labels(f.flow.name).inc()
                    copies = 2
                if same_partition:
                    target = self.tp[1]
                else:
                    target = to_positive(murmur2(r.key)) % n if r.key is not None else self.tp[1] % n
                headers = self._stamped(r.headers)
                for _ in range(copies):
                    out[target].append(RecordInput(r.key, r.value, r.timestamp, headers))
            for target, recs in out.items():
                per_partition[target].append(
                    encode_batch(recs, compression=header.codec, timestamp_type=1 if header.attributes & 0x08 else 0)
                )
        return {p: b"".join(parts) for p, parts in per_partition.items()}

    async def _produce_same_partition(self, topic: str, partition: int, batches: list[bytes | memoryview]) -> None:
        """The fast path's produce: acks=all, retried until acknowledged. After an answer that does
        not say whether the batches were appended (no answer, a timeout, an append not yet
        replicated), the batches that attempt did append (found in the target past
        ``target_end``) are dropped before the retry, so a lost answer does not turn into a
        duplicate; after a definite "not appended" (NOT_LEADER_FOR_PARTITION ...) the retry goes
        out at once, without that scan. An error retrying cannot fix raises FatalError.

        Order and retries with fetching ahead: whatever is fetched ahead waits in the copier's
        :class:`~headwater.mirror.fetch_ahead.FetchAhead` queue; the next produce of this partition
        leaves only once this one was acknowledged, and a retry resends exactly the batches not
        yet found in the target, so a retriable error in the middle of a run of batches neither
        reorders them (nothing later was sent) nor duplicates them (what the failed attempt
        appended is skipped). The produce is deliberately not pipelined: see docs/mirror.md,
        "Across a WAN link"."""
        backoff = 0.1
        attempt = 0
        while batches:
            attempt += 1
            await self._wait_for_lease()  # a retry too: the copier may have been paused while it backed off
            try:
                base = await produce_raw(
                    self.target, topic, partition, b"".join(batches), acks=-1, on_throttle=self._throttled
                )
                self.target_end = base + sum(batch_span(b) for b in batches)
                self._last_append = (base, batches)
                return
            except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as e:
                error: Exception = e
                self._produce_failed(topic, partition, e, backoff, attempt)
            await self._pause(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)
            try:
                await self.target.refresh([topic])
                if self.target_end >= 0 and not _not_appended(error):
                    n, end = await self._find_appended(topic, partition, self.target_end, batches)
                    if n:
                        log.info(
                            "%s: %s-%d: %d of %d batch(es) of the unanswered produce are in the target: not sent again",
                            self.flow.flow.name,
                            topic,
                            partition,
                            n,
                            len(batches),
                        )
                        self.target_end = max(self.target_end, end)
                        batches = batches[n:]
            except (KafkaConnectionError, KafkaTimeoutError, KafkaError):
                pass

    def _throttled(self, ms: int) -> None:
        """The target held this produce back by its quota (throttle_time_ms): reported, not an error."""
        self.metrics.throttle_report.throttled(self.flow.flow.name, self.flow.flow.target, ms)

    def _produce_failed(self, topic: str, partition: int, e: Exception, backoff: float, attempt: int) -> None:
        """Count and log a failed produce; raise FatalError when retrying cannot help."""
        name = self.flow.flow.name
        self.metrics.produce_errors.labels(name).inc()
        if isinstance(e, KafkaError) and e.code in FATAL_PRODUCE_ERRORS:
            raise FatalError(
                f"the target refused {topic}-{partition} from source offset {self.next_offset}: {e.code.name} "
                "(retrying cannot fix it: check the target topic's max.message.bytes / message.format and the "
                "source batch; the partition stays stopped until the mirror restarts)"
            ) from e
        quiet = attempt <= 3 and isinstance(e, KafkaError) and e.retriable
        log.log(
            logging.INFO if quiet else logging.WARNING,
            "%s: producing to %s-%d: %s; retrying in %.1fs (attempt %d)",
            name,
            topic,
            partition,
            e,
            backoff,
            attempt,
        )

    async def _find_appended(
        self, topic: str, partition: int, start: int, batches: list[bytes | memoryview]
    ) -> tuple[int, int]:
        """How many leading ``batches`` an unanswered produce appended (see :func:`skip_copied`):
        scans until all are found or the high watermark stood still for three seconds (a new
        leader's high watermark catches up with what it holds within a follower fetch or two)."""
        last_hw, still = -2, 0
        found = (0, -1)
        for _ in range(_SCAN_ROUNDS_MAX):
            await self.scan_budget.acquire()
            try:
                copies, hw = await scan_target(
                    self.target, topic, partition, start, max_held_bytes=self.scan_budget.max_bytes
                )
            finally:
                self.scan_budget.release()
            found = skip_copied(batches, copies or {})
            if found[0] == len(batches) or copies is None:
                return found
            still = still + 1 if hw == last_hw else 0
            if still >= 3:
                return found
            last_hw = hw
            await self._pause(1.0)
        return found

    async def _produce(self, topic: str, partition: int, payload: bytes) -> None:
        """The re-partitioning path's produce: acks=all, retried until acknowledged (at-least-once)."""
        backoff = 0.1
        attempt = 0
        while True:
            attempt += 1
            await self._wait_for_lease()  # as in _produce_same_partition
            try:
                await produce_raw(self.target, topic, partition, payload, acks=-1, on_throttle=self._throttled)
                return
            except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as e:
                self._produce_failed(topic, partition, e, backoff, attempt)
            await self._pause(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)
            try:
                await self.target.refresh([topic])
            except (KafkaConnectionError, KafkaTimeoutError, KafkaError):
                pass

    async def _wait_for_lease(self) -> None:
        """No produce while this member's ZooKeeper session may be expiring: another member may
        own the partition by now (review finding 4). On LOST the mirror stops the copier.
        Checked before every produce attempt, retries included: a copier paused (GC, SIGSTOP)
        while it backed off from a failed produce would otherwise send its stale batch the
        moment it runs again -- after another member took the partition over and copied on, so
        the batch landed twice in the target, out of order (seen in test_mirror_under_faults)."""
        group = self.flow.group
        if group.may_produce():
            return
        log.warning(
            "%s: %s-%d: no recent contact with the source ZooKeeper (this member's session may expire): not "
            "producing until it is back",
            self.flow.flow.name,
            *self.tp,
        )
        while not group.may_produce():
            await self._pause(0.1)

    async def _pause(self, seconds: float) -> None:
        """Sleep before a retry; a copier told to stop gives up the retry (its offset has not
        moved past what the target acknowledged, so the next owner starts from there)."""
        try:
            await asyncio.wait_for(self.stop.wait(), seconds)
        except TimeoutError:
            return
        raise _Stopped


async def _dropped(ahead: FetchAhead | None) -> None:
    """Stop fetching ahead (what it holds is fetched again from the acknowledged offset)."""
    if ahead is not None:
        await ahead.close()


class _Stopped(Exception):
    """The copier was told to stop while it waited to retry."""
