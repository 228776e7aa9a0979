"""The simple consumer: fetch from an offset, ask for offsets, follow partitions.

Fetch is sessionless (session id 0, epoch -1) at the highest common version (v4+, record batches);
ListOffsets v0 serves :meth:`Consumer.offsets_before` (the seeds' ``getOffsetsBefore``, several
offsets per partition), v1+ serves :meth:`Consumer.list_offset`. Requests go to the partition's
leader; stale-metadata errors refresh the metadata and retry with backoff.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from headwater.client.cluster import STALE_METADATA_ERRORS, Cluster
from headwater.client.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    UnknownTopicError,
)
from headwater.client.group_consumer import GroupConfig, GroupMembership, RebalanceListener
from headwater.client.raw import READ_COMMITTED, committed_batches, complete_batches, fetch_body
from headwater.client.security import ClientSecurity
from headwater.protocol.apis import FETCH, LIST_OFFSETS
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.record import read_record_set
from headwater.protocol.schema import Message

log = logging.getLogger("headwater.client.consumer")

__all__ = ["EARLIEST", "LATEST", "Consumer", "ConsumerRecord", "FetchResult", "OffsetAndTimestamp", "Subscription"]

#: ListOffsets timestamps: the log end offset, and the log start offset.
LATEST = -1
EARLIEST = -2

TopicPartition = tuple[str, int]


class ConsumerRecord(NamedTuple):
    """One record as a consumer reads it. A tuple: the record codec builds it in one step."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class FetchResult(NamedTuple):
    records: list[ConsumerRecord]
    high_watermark: int


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


@dataclass(slots=True)
class _PartitionData:
    records: list[ConsumerRecord]
    high_watermark: int
    log_start_offset: int
    next_offset: int  # where the next fetch should start (past control and empty batches too)


class Consumer:
    """An asyncio consumer: the simple consumer (fetch, offsets, follow), and with a ``group_id``
    a member of a Kafka consumer group (``subscribe``, ``poll``, ``commit``; see
    :mod:`headwater.client.group_consumer`, whose :class:`GroupConfig` names the other group
    settings accepted here: ``group_instance_id``, ``session_timeout_ms``, ``auto_offset_reset``,
    ``enable_auto_commit``, ``partition_assignment_strategy``, ...)."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        client_id: str = "headwater-consumer",
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
        retry_backoff_ms: int = 100,
        metadata_timeout_ms: int = 60000,
        unknown_topic_timeout_ms: int = 5000,
        retries: int = 10,
        isolation_level: int = 0,
        cluster: Cluster | None = None,
        security: ClientSecurity | Mapping[str, str] | None = None,
        group_id: str | None = None,
        **group_options: Any,
    ) -> None:
        if group_options and group_id is None:
            raise ValueError(f"{', '.join(sorted(group_options))}: group settings need a group_id")
        group_config = GroupConfig(group_id, **group_options) if group_id is not None else None
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.request_timeout = request_timeout_ms / 1000.0
        self.retries = retries
        self.isolation_level = isolation_level
        self._owns_cluster = cluster is None
        self.cluster = cluster or Cluster(
            bootstrap,
            security=security,
            client_id=client_id,
            connect_timeout=connect_timeout_ms / 1000.0,
            request_timeout=self.request_timeout,
            retry_backoff=self.retry_backoff,
            metadata_timeout=metadata_timeout_ms / 1000.0,
            unknown_topic_timeout=unknown_topic_timeout_ms / 1000.0,
            allow_auto_create_topics=False,
        )
        #: the group membership (None without a group_id)
        self.group = GroupMembership(self, group_config) if group_config is not None else None

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self.group is not None:
            await self.group.close()
        if self._owns_cluster:
            await self.cluster.close()

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids; UnknownTopicError if it does not exist."""
        return await self.cluster.partitions_for(topic)

    # -- consumer group (needs group_id) --------------------------------------------------------

    def _membership(self) -> GroupMembership:
        if self.group is None:
            raise RuntimeError("subscribe/poll/commit need a Consumer built with group_id=...")
        return self.group

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
        listener: RebalanceListener | None = None,
    ) -> None:
        """Join the group for ``topics`` or every topic matching ``pattern`` (a regular
        expression matched against the whole name); ``listener`` gets
        ``on_partitions_revoked``/``on_partitions_assigned``."""
        self._membership().subscribe(topics, pattern=pattern, listener=listener)

    async def poll(self, max_wait_ms: int | None = None) -> list[ConsumerRecord]:
        """The next records of the assigned partitions ([] if none came within the wait)."""
        return await self._membership().poll(max_wait_ms)

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (the next offset to read per partition; default: the positions)."""
        await self._membership().commit(offsets)

    async def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return await self._membership().committed(partitions)

    def assignment(self) -> set[TopicPartition]:
        return set(self._membership().assignment)

    # -- fetch -----------------------------------------------------------------------------------

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = 1048576,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
    ) -> FetchResult:
        """Records of (topic, partition) from ``offset`` on, and the partition's high watermark.

        Waits up to ``max_wait_ms`` for ``min_bytes``; an empty list means nothing new arrived.
        Raises OffsetOutOfRangeError, UnknownTopicError, KafkaError.
        """
        got = await self.fetch_many(
            [(topic, partition, offset)], max_bytes=max_bytes, max_wait_ms=max_wait_ms, min_bytes=min_bytes
        )
        return got[(topic, partition)]

    async def fetch_many(
        self,
        requests: Iterable[tuple[str, int, int]],
        *,
        max_bytes: int = 1048576,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        total_max_bytes: int = 52428800,
    ) -> dict[TopicPartition, FetchResult]:
        """Fetch several (topic, partition, offset) at once: one request per leader, concurrently.

        ``max_bytes`` bounds each partition, ``total_max_bytes`` each response.
        """
        data = await self._fetch(list(requests), max_bytes, max_wait_ms, min_bytes, total_max_bytes)
        return {tp: FetchResult(d.records, d.high_watermark) for tp, d in data.items()}

    async def _fetch(
        self,
        requests: list[tuple[str, int, int]],
        partition_max_bytes: int,
        max_wait_ms: int,
        min_bytes: int,
        total_max_bytes: int,
        *,
        partial: bool = False,
    ) -> dict[TopicPartition, _PartitionData]:
        """One answer per request, retrying stale-metadata and connection errors ``retries`` times.

        With ``partial``, one round only: partitions that failed with a retriable error (or have no
        known leader) are left out of the answer and the metadata is refreshed for them.
        """
        out: dict[TopicPartition, _PartitionData] = {}
        todo = {(t, p): o for t, p, o in requests}
        backoff = self.retry_backoff
        last: Exception | None = None
        for attempt in range(1 if partial else self.retries + 1):
            if attempt:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                await self.cluster.refresh({t for t, _ in todo})
            by_node: dict[int, dict[TopicPartition, int]] = {}
            retry: dict[TopicPartition, int] = {}
            for tp, offset in todo.items():
                leader = self.cluster.leader(*tp)
                if leader < 0:
                    if partial and self.cluster.topics.get(tp[0]) is not None:
                        retry[tp] = offset
                        continue
                    leader = await self.cluster.leader_for(*tp)
                by_node.setdefault(leader, {})[tp] = offset
            results = await asyncio.gather(
                *(
                    self._fetch_from(node, parts, partition_max_bytes, max_wait_ms, min_bytes, total_max_bytes)
                    for node, parts in by_node.items()
                ),
                return_exceptions=True,
            )
            for (_node, parts), result in zip(by_node.items(), results, strict=True):
                if isinstance(result, KafkaConnectionError | KafkaTimeoutError):
                    last = result
                    retry.update(parts)
                    continue
                if isinstance(result, BaseException):
                    raise result
                got, stale = result
                out.update(got)
                for tp, code in stale.items():
                    last = KafkaError(code, f"fetching {tp[0]}-{tp[1]}: {code.name}")
                    retry[tp] = parts[tp]
            if not retry:
                return out
            todo = retry
        if partial:
            if last is not None:
                log.info("fetch incomplete, will retry: %s", last)
            if not out:  # nothing to hand back: do not spin
                await asyncio.sleep(self.retry_backoff)
            try:
                await self.cluster.refresh({t for t, _ in todo})
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                log.warning("metadata refresh failed: %s", e)
            return out
        assert last is not None
        raise last

    async def _fetch_from(
        self,
        node: int,
        parts: dict[TopicPartition, int],
        partition_max_bytes: int,
        max_wait_ms: int,
        min_bytes: int,
        total_max_bytes: int,
    ) -> tuple[dict[TopicPartition, _PartitionData], dict[TopicPartition, ErrorCode]]:
        conn = await self.cluster.connection(node)
        version = conn.version_for(FETCH)
        body = fetch_body(parts, partition_max_bytes, max_wait_ms, min_bytes, total_max_bytes, self.isolation_level)
        response = await conn.request(FETCH, body, version, timeout=self.request_timeout + max_wait_ms / 1000.0)
        top = ErrorCode.of(response.get("error_code", 0))
        if top is not ErrorCode.NONE:
            raise KafkaError(top, f"fetch from broker {node}: {top.name}")
        out: dict[TopicPartition, _PartitionData] = {}
        stale: dict[TopicPartition, ErrorCode] = {}
        for t in response["responses"]:
            topic = t["topic"]
            for p in t["partitions"]:
                tp = (topic, int(p["partition_index"]))
                if tp not in parts:
                    continue
                offset = parts[tp]
                code = ErrorCode.of(p["error_code"])
                if code is ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise OffsetOutOfRangeError(topic, tp[1], offset)
                if code in STALE_METADATA_ERRORS or code.retriable:
                    stale[tp] = code
                    continue
                if code is not ErrorCode.NONE:
                    raise KafkaError(code, f"fetching {topic}-{tp[1]} at offset {offset}: {code.name}")
                out[tp] = _decode(topic, tp[1], offset, p, self.isolation_level)
        for tp in parts:
            if tp not in out and tp not in stale:
                stale[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return out, stale

    # -- offsets ---------------------------------------------------------------------------------

    async def offsets_before(self, topic: str, partition: int, time: int, max_offsets: int = 1) -> list[int]:
        """ListOffsets v0: up to ``max_offsets`` segment start offsets before ``time`` (ms), newest
        first; ``time`` -1 (LATEST) gives the log end offset, -2 (EARLIEST) the log start offset."""

        def body(version: int) -> Message:
            return _list_offsets_body(topic, partition, time, max_offsets, self.isolation_level)

        p = await self._list_offsets(topic, partition, body, version=0)
        return [int(o) for o in p["old_style_offsets"]]

    async def list_offset(self, topic: str, partition: int, timestamp: int) -> OffsetAndTimestamp:
        """ListOffsets v1+: the first offset whose timestamp is >= ``timestamp`` (ms), or LATEST (-1) /
        EARLIEST (-2). ``offset`` is -1 when no record is that recent."""

        def body(version: int) -> Message:
            return _list_offsets_body(topic, partition, timestamp, 1, self.isolation_level)

        p = await self._list_offsets(topic, partition, body, version=None)
        return OffsetAndTimestamp(int(p["offset"]), int(p["timestamp"]))

    async def earliest_offset(self, topic: str, partition: int) -> int:
        return (await self.list_offset(topic, partition, EARLIEST)).offset

    async def latest_offset(self, topic: str, partition: int) -> int:
        return (await self.list_offset(topic, partition, LATEST)).offset

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | Exception]:
        """The log end offsets of many partitions at once, as the Java consumer's ``endOffsets``: one
        ListOffsets (v1+, LATEST) per leader, the leaders asked concurrently; under read_committed the
        last stable offset (v2+), as :meth:`latest_offset`. Each partition maps to its offset or to the
        error it met (no leader known, its broker unreachable or silent past the request timeout, the
        broker's error code); the metadata of such topics is refreshed before this returns, so the next
        call asks the new leader. Not retried here: made for callers that ask again periodically."""
        wanted = sorted(set(partitions))
        out: dict[TopicPartition, int | Exception] = {}
        stale: set[str] = set()
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in wanted:
            leader = self.cluster.leader(*tp)
            if leader < 0:
                stale.add(tp[0])
            by_leader.setdefault(leader, []).append(tp)
        if -1 in by_leader:  # not in the cached metadata: look once, then ask whoever leads now
            try:
                await self.cluster.refresh(sorted(stale))
            except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as e:
                for tp in by_leader.pop(-1):
                    out[tp] = e
            else:
                stale.clear()
                for tp in by_leader.pop(-1):
                    leader = self.cluster.leader(*tp)
                    if leader < 0:
                        out[tp] = KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader for {tp[0]}-{tp[1]}")
                    else:
                        by_leader.setdefault(leader, []).append(tp)

        async def ask(node: int, tps: list[TopicPartition]) -> None:
            asked = set(tps)
            topics: dict[str, list[Message]] = {}
            for topic, partition in tps:
                topics.setdefault(topic, []).append(
                    {
                        "partition_index": partition,
                        "current_leader_epoch": -1,
                        "timestamp": LATEST,
                        "max_num_offsets": 1,
                    }
                )
            body = {
                "replica_id": -1,
                "isolation_level": self.isolation_level,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }
            try:
                conn = await self.cluster.connection(node)
                v = conn.version_for(LIST_OFFSETS, min_version=1)
                response = await conn.request(LIST_OFFSETS, body, v)
            except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as e:
                for tp in tps:
                    out[tp] = e
                stale.update(t for t, _ in tps)
                return
            for t in response["topics"]:
                for p in t["partitions"]:
                    tp = (t["name"], int(p["partition_index"]))
                    if tp not in out and tp in asked:
                        code = ErrorCode.of(p["error_code"])
                        if code is ErrorCode.NONE:
                            out[tp] = int(p["offset"])
                        else:
                            out[tp] = KafkaError(code, f"end offset of {tp[0]}-{tp[1]}: {code.name}")
                            if code in STALE_METADATA_ERRORS or code.retriable:
                                stale.add(tp[0])
            for tp in tps:
                if tp not in out:
                    out[tp] = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {tp[0]}-{tp[1]}")

        await asyncio.gather(*(ask(node, tps) for node, tps in by_leader.items()))
        if stale:
            try:
                await self.cluster.refresh(sorted(stale))
            except (KafkaConnectionError, KafkaTimeoutError, KafkaError):
                pass  # the next call looks again
        return {tp: out[tp] for tp in wanted}

    async def _list_offsets(self, topic: str, partition: int, make_body: Any, version: int | None) -> Message:
        backoff = self.retry_backoff
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                await self.cluster.refresh([topic])
            leader = await self.cluster.leader_for(topic, partition)
            try:
                conn = await self.cluster.connection(leader)
                v = conn.version_for(LIST_OFFSETS, min_version=1) if version is None else version
                response = await conn.request(LIST_OFFSETS, make_body(v), v)
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                last = e
                continue
            for t in response["topics"]:
                for p in t["partitions"]:
                    if t["name"] != topic or p["partition_index"] != partition:
                        continue
                    code = ErrorCode.of(p["error_code"])
                    if code is ErrorCode.NONE:
                        return dict(p)
                    if code in STALE_METADATA_ERRORS or code.retriable:
                        last = KafkaError(code, f"offsets of {topic}-{partition}: {code.name}")
                        break
                    raise KafkaError(code, f"offsets of {topic}-{partition}: {code.name}")
                else:
                    continue
                break
            else:
                last = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {topic}-{partition}")
        assert last is not None
        if isinstance(last, KafkaError) and last.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise UnknownTopicError(topic, partition)
        raise last

    # -- following -------------------------------------------------------------------------------

    def follow(
        self,
        topic: str,
        partitions: int | Sequence[int] | None = None,
        start: str | int = "latest",
        *,
        max_wait_ms: int = 500,
        max_bytes: int = 1048576,
    ) -> Subscription:
        """Follow ``partitions`` (one, several, or None for all) of ``topic`` from ``start``:
        "earliest", "latest" or an offset. ``async for record in consumer.follow(...)`` never ends;
        :meth:`Subscription.poll` returns what one round of fetches brought."""
        parts = [partitions] if isinstance(partitions, int) else None if partitions is None else list(partitions)
        return Subscription(self, topic, parts, start, max_wait_ms=max_wait_ms, max_bytes=max_bytes)


class Subscription:
    """Positions in some partitions of one topic, advanced by :meth:`poll`."""

    def __init__(
        self,
        consumer: Consumer,
        topic: str,
        partitions: list[int] | None,
        start: str | int,
        *,
        max_wait_ms: int = 500,
        max_bytes: int = 1048576,
    ) -> None:
        if isinstance(start, str) and start not in ("earliest", "latest"):
            raise ValueError(f"start must be 'earliest', 'latest' or an offset, not {start!r}")
        self.consumer = consumer
        self.topic = topic
        self.partitions = partitions
        self.start = start
        self.max_wait_ms = max_wait_ms
        self.max_bytes = max_bytes
        self.positions: dict[int, int] = {}
        self.high_watermarks: dict[int, int] = {}
        # The next round's fetch, started as soon as a round brought records so that it travels
        # while the caller handles them; kept only while the positions are the ones it asked for.
        self._prefetch: asyncio.Task[dict[TopicPartition, _PartitionData]] | None = None
        self._prefetch_from: dict[int, int] = {}

    async def resolve(self) -> None:
        """Resolve the start positions now ("earliest"/"latest": ListOffsets), without fetching;
        the first :meth:`poll` does it otherwise."""
        await self._init()

    async def _init(self) -> None:
        if self.positions:
            return
        all_parts = await self.consumer.partitions_for(self.topic)
        parts = all_parts if self.partitions is None else self.partitions
        for p in parts:
            if p not in all_parts:
                raise UnknownTopicError(self.topic, p)
        if isinstance(self.start, int):
            self.positions = dict.fromkeys(parts, self.start)
            return
        which = EARLIEST if self.start == "earliest" else LATEST
        offsets = await asyncio.gather(*(self.consumer.list_offset(self.topic, p, which) for p in parts))
        self.positions = {p: o.offset for p, o in zip(parts, offsets, strict=True)}

    async def poll(self, max_wait_ms: int | None = None) -> list[ConsumerRecord]:
        """One fetch round over every followed partition; [] when nothing arrived within the wait.

        When a round brings records, the next round's fetch starts at once, before this returns
        (one fetch ahead, as Kafka's consumer does); it is dropped if ``positions`` are changed."""
        await self._init()
        wait = self.max_wait_ms if max_wait_ms is None else max_wait_ms
        started = time.monotonic()
        pending, self._prefetch = self._prefetch, None
        try:
            if pending is not None and self._prefetch_from == self.positions:
                data = await pending
            else:
                if pending is not None:
                    pending.cancel()
                data = await self._fetch_round(wait)
        except (KafkaConnectionError, KafkaTimeoutError) as e:
            log.warning("fetch failed, retrying: %s", e)
            await self._pause(started, wait)
            return []
        out: list[ConsumerRecord] = []
        for (_, p), d in sorted(data.items()):
            out.extend(d.records)
            self.high_watermarks[p] = d.high_watermark
            if d.next_offset > self.positions[p]:
                self.positions[p] = d.next_offset
        if out:
            self._prefetch_from = dict(self.positions)
            self._prefetch = asyncio.ensure_future(self._fetch_round(self.max_wait_ms))
            self._prefetch.add_done_callback(_retrieve)
        return out

    def _fetch_round(self, wait_ms: int) -> Awaitable[dict[TopicPartition, _PartitionData]]:
        requests = [(self.topic, p, o) for p, o in self.positions.items()]
        return self.consumer._fetch(requests, self.max_bytes, wait_ms, 1, 52428800, partial=True)

    def close(self) -> None:
        """Drop the fetch running ahead (if any)."""
        if self._prefetch is not None:
            self._prefetch.cancel()
            self._prefetch = None

    async def _pause(self, started: float, wait_ms: int) -> None:
        await asyncio.sleep(max(self.consumer.retry_backoff, wait_ms / 1000.0 - (time.monotonic() - started)))

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while True:
            for record in await self.poll():
                yield record


def _retrieve(task: asyncio.Task[Any]) -> None:
    """A fetch ahead that nobody awaited ends quietly (its error shows when the next poll refetches)."""
    if not task.cancelled():
        task.exception()


def _list_offsets_body(topic: str, partition: int, timestamp: int, max_offsets: int, isolation: int) -> Message:
    return {
        "replica_id": -1,
        "isolation_level": isolation,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": partition,
                        "current_leader_epoch": -1,
                        "timestamp": timestamp,
                        "max_num_offsets": max_offsets,
                    }
                ],
            }
        ],
    }


def _decode(topic: str, partition: int, offset: int, p: Message, isolation_level: int = 0) -> _PartitionData:
    records: list[ConsumerRecord] = []
    next_offset = offset
    data = p.get("records")
    if data:
        records, last, complete = read_record_set(data, ConsumerRecord, (topic, partition), offset)
        next_offset = max(next_offset, last)
        if isolation_level == READ_COMMITTED and p.get("aborted_transactions"):
            # the batches of aborted transactions are in the record set too: read only the others
            aborted = [(int(a["producer_id"]), int(a["first_offset"])) for a in p["aborted_transactions"]]
            kept = committed_batches(complete_batches(data, offset), aborted)
            joined = b"".join(bytes(b) for _, b in kept)
            records = read_record_set(joined, ConsumerRecord, (topic, partition), offset)[0] if joined else []
        if not complete:  # only the start of a batch: no progress is possible with this max_bytes
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"the record batch at offset {offset} of {topic}-{partition} is larger than the "
                f"{len(data)} bytes the broker sent: raise max_bytes",
            )
    return _PartitionData(records, int(p["high_watermark"]), int(p.get("log_start_offset", -1)), next_offset)
