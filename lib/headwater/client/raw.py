"""Record batches as bytes: fetch them raw, produce them raw, without decoding a record.

For services that move or count batches rather than records (the mirror's fast path, the audit's
counting, the loader): :func:`fetch_raw` returns each partition's record set exactly as the broker
sent it, cut to its complete batches (:func:`complete_batches`); :func:`produce_raw` sends record
sets to one partition and waits for the acknowledgement.

A batch produced raw keeps everything inside its CRC (records, compression, timestamps, headers);
the destination broker assigns the base offset and partition leader epoch, which lie before the
CRC'd range (see :mod:`headwater.protocol.records.header`). :func:`as_plain_batch` resets the
producer id / epoch / base sequence of an idempotent or transactional batch (the destination knows
nothing of that producer) and recomputes the CRC.

Isolation level (KIP-98). A fetch at :data:`READ_COMMITTED` returns records only below the
partition's last stable offset (LSO) and, with them, the transactions the broker knows were
aborted in that range (``aborted_transactions``: producer id and first offset). The batches still
include the aborted transactions' data and the control batches (markers): :func:`committed_batches`
is the one place that leaves them out, as Kafka's consumer does, for every reader in the project
(the consumer, the mirror, the loader, the audit). Readers move their position past what it left
out (the offsets of the batches fetched), so aborted ranges and markers never stall them.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from headwater.client.cluster import STALE_METADATA_ERRORS, Cluster
from headwater.client.errors import KafkaConnectionError, KafkaTimeoutError, OffsetOutOfRangeError
from headwater.protocol.apis import FETCH, PRODUCE
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records import header as batch_header
from headwater.protocol.records.control import decode_marker
from headwater.protocol.records.header import BatchHeader
from headwater.protocol.schema import Message

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "RawPartition",
    "as_plain_batch",
    "committed_batches",
    "complete_batches",
    "fetch_body",
    "fetch_from_node",
    "fetch_raw",
    "produce_raw",
]

TopicPartition = tuple[str, int]
#: Fetch / ListOffsets isolation_level: everything up to the high watermark, or only what is
#: committed (below the last stable offset, aborted transactions left out)
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
#: (producer id, first offset) of a transaction a read_committed Fetch reported as aborted
AbortedTxn = tuple[int, int]

# producer_id (int64) at byte 43, producer_epoch (int16) at 51, base_sequence (int32) at 53
_PRODUCER_STATE = struct.Struct(">qhi")
_PRODUCER_STATE_OFFSET = 43
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")


@dataclass(slots=True)
class RawPartition:
    """One partition of a raw fetch: its complete batches (bytes as sent) and the offsets around them."""

    batches: list[tuple[BatchHeader, memoryview]]
    high_watermark: int
    log_start_offset: int
    #: read_committed: the partition's last stable offset (-1 for read_uncommitted fetches)
    last_stable_offset: int = -1
    #: read_committed: the transactions aborted in the fetched range (empty otherwise)
    aborted_transactions: tuple[AbortedTxn, ...] = ()

    @property
    def end_offset(self) -> int:
        """Where a reader at the fetch's isolation level can read up to: the LSO for
        read_committed, the high watermark otherwise."""
        return self.last_stable_offset if self.last_stable_offset >= 0 else self.high_watermark

    def committed(self) -> list[tuple[BatchHeader, memoryview]]:
        """The data batches a consumer at the fetch's isolation level reads (:func:`committed_batches`)."""
        return committed_batches(self.batches, self.aborted_transactions)

    def but(self, batches: list[tuple[BatchHeader, memoryview]]) -> RawPartition:
        """The same answer with other batches (a part of these)."""
        return RawPartition(
            batches, self.high_watermark, self.log_start_offset, self.last_stable_offset, self.aborted_transactions
        )


def complete_batches(records: memoryview | bytes | None, from_offset: int = 0) -> list[tuple[BatchHeader, memoryview]]:
    """The complete magic-2 batches of a fetched record set that end at or after ``from_offset``.

    A truncated batch at the end (the broker cuts at max_bytes) is left out, as are batches wholly
    before ``from_offset`` (a fetch starts at the batch holding the requested offset).
    """
    out: list[tuple[BatchHeader, memoryview]] = []
    if not records:
        return out
    view = memoryview(records)
    n = len(view)
    pos = 0
    while True:
        peek = batch_header.peek_offset_and_length(view, pos)
        if peek is None:
            return out
        end = pos + batch_header.LOG_OVERHEAD + peek[1]
        if peek[1] < batch_header.HEADER_SIZE - batch_header.LOG_OVERHEAD:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record batch length {peek[1]} at byte {pos}")
        if end > n:
            return out
        h = batch_header.read_header(view, pos)
        if h.next_offset > from_offset:
            out.append((h, view[pos:end]))
        pos = end


def committed_batches(
    batches: Sequence[tuple[BatchHeader, memoryview]], aborted_transactions: Iterable[AbortedTxn] = ()
) -> list[tuple[BatchHeader, memoryview]]:
    """The data batches of a fetch a consumer reads: control batches (markers) left out, and with
    the ``aborted_transactions`` of a read_committed Fetch, the batches of those transactions too.

    Kafka's consumer rule (Fetcher, "isolation level READ_COMMITTED"): going through the batches in
    offset order, an aborted transaction becomes current for its producer once a batch of that
    producer reaches its first offset; a transactional batch of a producer with a current aborted
    transaction is skipped, and that producer's ABORT marker ends it. A read_uncommitted fetch has
    no aborted transactions, so only the markers are left out.
    """
    pending = sorted(aborted_transactions, key=lambda a: a[1])
    aborted: set[int] = set()
    i = 0
    out: list[tuple[BatchHeader, memoryview]] = []
    for h, b in batches:
        if pending and h.producer_id != batch_header.NO_PRODUCER_ID:
            while i < len(pending) and pending[i][1] <= h.last_offset:
                aborted.add(pending[i][0])
                i += 1
            if h.is_control:
                if h.producer_id in aborted and not decode_marker(b).commit:
                    aborted.discard(h.producer_id)
                continue
            if h.is_transactional and h.producer_id in aborted:
                continue
        if not h.is_control:
            out.append((h, b))
    return out


def as_plain_batch(h: BatchHeader, batch: memoryview) -> bytes | memoryview:
    """The batch as a plain (non-idempotent, non-transactional) producer would have sent it.

    Unchanged (no copy) when it already is one; otherwise producer id/epoch/sequence become -1,
    the transactional bit is cleared, and the CRC is recomputed over the changed bytes.
    """
    transactional = bool(h.attributes & batch_header.TRANSACTIONAL_BIT)
    if h.producer_id == batch_header.NO_PRODUCER_ID and not transactional:
        return batch
    out = bytearray(batch)
    _ATTRIBUTES.pack_into(out, batch_header.ATTRIBUTES_OFFSET, h.attributes & ~batch_header.TRANSACTIONAL_BIT)
    _PRODUCER_STATE.pack_into(out, _PRODUCER_STATE_OFFSET, -1, -1, -1)
    _CRC.pack_into(out, batch_header.CRC_OFFSET, batch_header.compute_crc(out, 0, len(out)))
    return bytes(out)


async def fetch_raw(
    cluster: Cluster,
    requests: Iterable[tuple[str, int, int]],
    *,
    max_bytes: int = 1048576,
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    total_max_bytes: int = 52428800,
    timeout: float = 30.0,
    isolation_level: int = READ_UNCOMMITTED,
) -> tuple[dict[TopicPartition, RawPartition], dict[TopicPartition, ErrorCode]]:
    """Fetch several (topic, partition, offset): one request per leader, concurrently.

    Returns the partitions answered and, separately, those that failed with a retriable or
    stale-metadata error (the caller refreshes metadata and asks again). OFFSET_OUT_OF_RANGE raises
    :class:`OffsetOutOfRangeError`; any other error raises :class:`KafkaError`.
    """
    by_node: dict[int, dict[TopicPartition, int]] = {}
    failed: dict[TopicPartition, ErrorCode] = {}
    for topic, partition, offset in requests:
        leader = cluster.leader(topic, partition)
        if leader < 0:
            failed[(topic, partition)] = ErrorCode.LEADER_NOT_AVAILABLE
            continue
        by_node.setdefault(leader, {})[(topic, partition)] = offset
    results = await asyncio.gather(
        *(
            _fetch_from(
                cluster, node, parts, max_bytes, max_wait_ms, min_bytes, total_max_bytes, timeout, isolation_level
            )
            for node, parts in by_node.items()
        ),
        return_exceptions=True,
    )
    out: dict[TopicPartition, RawPartition] = {}
    for parts, result in zip(by_node.values(), results, strict=True):
        if isinstance(result, KafkaConnectionError | KafkaTimeoutError):
            failed.update(dict.fromkeys(parts, ErrorCode.NETWORK_EXCEPTION))
            continue
        if isinstance(result, BaseException):
            raise result
        got, stale = result
        out.update(got)
        failed.update(stale)
    return out, failed


def fetch_body(
    parts: dict[TopicPartition, int],
    partition_max_bytes: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int = 0,
) -> Message:
    """A consumer's sessionless Fetch request body for (topic, partition) -> offset."""
    topics: dict[str, list[Message]] = {}
    for (topic, partition), offset in parts.items():
        topics.setdefault(topic, []).append(
            {
                "partition": partition,
                "current_leader_epoch": -1,
                "fetch_offset": offset,
                "log_start_offset": -1,
                "partition_max_bytes": partition_max_bytes,
            }
        )
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation_level,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


async def _fetch_from(
    cluster: Cluster,
    node: int,
    parts: dict[TopicPartition, int],
    max_bytes: int,
    max_wait_ms: int,
    min_bytes: int,
    total_max_bytes: int,
    timeout: float,
    isolation_level: int,
) -> tuple[dict[TopicPartition, RawPartition], dict[TopicPartition, ErrorCode]]:
    answers = await fetch_from_node(
        cluster,
        node,
        parts,
        max_bytes=max_bytes,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        total_max_bytes=total_max_bytes,
        timeout=timeout,
        isolation_level=isolation_level,
    )
    out: dict[TopicPartition, RawPartition] = {}
    stale: dict[TopicPartition, ErrorCode] = {}
    for tp, answer in answers.items():
        if isinstance(answer, RawPartition):
            out[tp] = answer
        elif isinstance(answer, OffsetOutOfRangeError):
            raise answer
        elif answer.code in STALE_METADATA_ERRORS or answer.code.retriable:
            stale[tp] = answer.code
        else:
            raise answer
    return out, stale


async def fetch_from_node(
    cluster: Cluster,
    node: int,
    parts: dict[TopicPartition, int],
    *,
    max_bytes: int = 1048576,
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    total_max_bytes: int = 52428800,
    timeout: float = 30.0,
    isolation_level: int = READ_UNCOMMITTED,
) -> dict[TopicPartition, RawPartition | KafkaError]:
    """One Fetch to one broker for several (topic, partition) -> offset: each partition's answer,
    or its error as a KafkaError (:class:`OffsetOutOfRangeError` for OFFSET_OUT_OF_RANGE;
    UNKNOWN_TOPIC_OR_PARTITION for a partition the broker left out), so one partition's error
    does not fail the others. A top-level error, a connection error or a timeout raises."""
    conn = await cluster.connection(node)
    version = conn.version_for(FETCH, min_version=4)  # record batches
    body = fetch_body(parts, max_bytes, max_wait_ms, min_bytes, total_max_bytes, isolation_level)
    response = await conn.request(FETCH, body, version, timeout=timeout + max_wait_ms / 1000.0)
    top = ErrorCode.of(response.get("error_code", 0))
    if top is not ErrorCode.NONE:
        raise KafkaError(top, f"fetch from broker {node}: {top.name}")
    out: dict[TopicPartition, RawPartition | KafkaError] = {}
    for t in response["responses"]:
        for p in t["partitions"]:
            tp = (t["topic"], int(p["partition_index"]))
            if tp not in parts:
                continue
            code = ErrorCode.of(p["error_code"])
            if code is ErrorCode.OFFSET_OUT_OF_RANGE:
                out[tp] = OffsetOutOfRangeError(tp[0], tp[1], parts[tp])
            elif code is not ErrorCode.NONE:
                out[tp] = KafkaError(code, f"fetching {tp[0]}-{tp[1]} at offset {parts[tp]}: {code.name}")
            else:
                out[tp] = RawPartition(
                    complete_batches(p.get("records"), parts[tp]),
                    int(p["high_watermark"]),
                    int(p.get("log_start_offset", -1)),
                    *_isolation_view(p, isolation_level),
                )
    for tp in parts:
        if tp not in out:
            out[tp] = KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"broker {node} did not answer for {tp[0]}-{tp[1]}"
            )
    return out


def _isolation_view(p: Message, isolation_level: int) -> tuple[int, tuple[AbortedTxn, ...]]:
    """A partition answer's last stable offset and aborted transactions (read_committed only)."""
    if isolation_level != READ_COMMITTED:
        return -1, ()
    aborted = tuple((int(a["producer_id"]), int(a["first_offset"])) for a in p.get("aborted_transactions") or ())
    return int(p.get("last_stable_offset", -1)), aborted


async def produce_raw(
    cluster: Cluster,
    topic: str,
    partition: int,
    records: bytes | bytearray | memoryview,
    *,
    acks: int = -1,
    timeout_ms: int = 30000,
    on_throttle: Callable[[int], None] | None = None,
) -> int:
    """Produce a record set (complete magic-2 batches) to one partition; returns the base offset
    the leader assigned. Raises KafkaError (retriable ones included: the caller decides whether to
    retry, knowing a retry after a lost answer can duplicate) or a connection/timeout error.
    ``on_throttle(ms)``: called when the answer carries ``throttle_time_ms`` > 0 (a client quota of
    the target held this producer back; the broker mutes the connection for that time)."""
    leader = await cluster.leader_for(topic, partition)
    conn = await cluster.connection(leader)
    version = conn.version_for(PRODUCE, min_version=3)
    body: Message = {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "records": records}]}],
    }
    response = await conn.request(PRODUCE, body, version, timeout=timeout_ms / 1000.0 + 5.0)
    throttle_ms = response.get("throttle_time_ms") or 0
    if throttle_ms > 0 and on_throttle is not None:
        on_throttle(int(throttle_ms))
    for t in response["responses"]:
        for p in t["partitions"]:
            if p["partition_index"] != partition:
                continue
            code = ErrorCode.of(p["error_code"])
            if code is not ErrorCode.NONE:
                if code in STALE_METADATA_ERRORS:
                    cluster.topics.pop(topic, None)  # next leader_for() asks again
                raise KafkaError(code, f"producing to {topic}-{partition}: {code.name}")
            return int(p["base_offset"])
    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {topic}-{partition}")
