"""The producer: records are partitioned, collected into one open batch per partition, and sent
by a background task when a batch is full (``batch_size`` bytes) or has waited ``linger_ms``.

Each Produce request carries at most one batch per partition, and a partition has at most one
batch in flight, so records of a partition are written in the order they were sent, retries
included. Retriable errors (NOT_LEADER_FOR_PARTITION, a broken connection, a timeout, ...) put
the batch back at the head of its partition's queue after ``retry_backoff_ms`` (refreshing
metadata when the error says it is stale) until ``retries`` or ``delivery_timeout_ms`` run out.
Whatever finally happens to a record is reported through the future :meth:`Producer.send`
returned: a :class:`RecordMetadata`, or a :class:`KafkaError` / :class:`KafkaConnectionError` /
:class:`KafkaTimeoutError`.

With ``enable_idempotence`` (Kafka's ``enable.idempotence``; needs acks=all, the default then)
the producer asks a broker for a producer id (InitProducerId) before its first batch and numbers
each partition's records from sequence 0; a batch keeps its producer id and sequence through
every retry, so a broker that already wrote it answers with the original offset instead of
writing it twice (see docs/protocol.md). DUPLICATE_SEQUENCE_NUMBER counts as delivered (offset
-1: written, offset unknown). UNKNOWN_PRODUCER_ID (the broker forgot the producer, e.g. after
retention removed its records) re-sends the batch under a new producer id. When a batch that was
given a sequence fails for good (an expiry, a non-retriable error), whether it was written is
unknown, so the producer takes a new producer id for the batches after it: the next ones start
again at sequence 0 instead of failing with OUT_OF_ORDER_SEQUENCE_NUMBER forever.

Threads: the record accumulator (the partition queues, their open batches, the buffer count and
the partitioner) is guarded by one lock, so :meth:`Producer.try_append` may be called from any
thread -- :class:`~headwater.client.sync.SyncProducer` appends from its callers' threads, as Java's
``KafkaProducer.send`` appends to its ``RecordAccumulator``, and the loop thread only drains whole
batches. Everything else (the sender, requests, metadata) runs on the producer's event loop.

Counting: a ``batch_counter`` (:class:`BatchCounter`, what the auditing producer installs) is told
when a batch opens and, once, how it ended, with the records' timestamps when acknowledged: audit
counts cost nothing per record.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from headwater.client.cluster import STALE_METADATA_ERRORS, Cluster
from headwater.client.errors import KafkaConnectionError, KafkaTimeoutError, UnknownTopicError
from headwater.client.partitioner import DefaultPartitioner, Partitioner
from headwater.client.record_future import BatchOutcome, RecordFuture, RecordMetadata
from headwater.client.security import ClientSecurity
from headwater.client.transactions import TransactionManager
from headwater.protocol.apis import INIT_PRODUCER_ID, PRODUCE
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.compression import Codec, codec_from_name
from headwater.protocol.records.record import encode_batch

log = logging.getLogger("headwater.client.producer")

__all__ = ["BatchCounter", "Producer", "RecordFuture", "RecordMetadata", "to_bytes"]

_BATCH_OVERHEAD = 61  # the record batch header
_RECORD_OVERHEAD = 21  # varints and attributes of one record, at most (small records are less)
_SEQUENCE_SPACE = 2**31  # idempotent sequences are int32 and wrap to 0

F = TypeVar("F")
Serializer = Callable[[Any], bytes | None]
Headers = tuple[tuple[str, bytes | None], ...]
#: One queued record: (key, value, timestamp, headers), what encode_batch takes (a plain tuple:
#: cheaper to build than a NamedTuple, once per record).
_Record = tuple[bytes | None, bytes | None, int, Headers]


class BatchCounter(Protocol):
    """Counts a producer's records per batch (what :class:`~headwater.client.audit.AuditingProducer`
    installs as ``Producer.batch_counter``): told when a batch opens, and once whether it was
    acknowledged or failed. No call per record: the records' timestamps come with the acknowledgement."""

    def opened(self, topic: str, outcome: BatchOutcome, timestamp: int) -> bool:
        """A batch of ``topic`` opened with a record of ``timestamp`` (under the accumulator's lock,
        in any thread); whether to count it (then exactly one of the two calls below follows)."""
        ...

    def acknowledged(self, topic: str, outcome: BatchOutcome, timestamps: list[int]) -> None:
        """The broker acknowledged the batch; ``timestamps`` are its records' (loop thread, before
        the records' futures settle)."""
        ...

    def failed(self, outcome: BatchOutcome) -> None:
        """The batch failed for good (loop thread, before its futures settle)."""
        ...


def to_bytes(value: Any) -> bytes | None:
    """The default serializer: bytes-like as is, str as UTF-8, None as null."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"cannot send a {type(value).__name__} without a serializer (bytes or str expected)")


def _plain_headers(headers: tuple[Any, ...]) -> bool:
    """Whether ``headers`` holds only exact (str, bytes or None) 2-tuples: nothing in it can change."""
    for h in headers:
        if type(h) is not tuple or len(h) != 2 or type(h[0]) is not str or not (h[1] is None or type(h[1]) is bytes):
            return False
    return True


def parse_acks(acks: int | str) -> int:
    if isinstance(acks, str):
        text = acks.strip().lower()
        if text == "all":
            return -1
        try:
            acks = int(text)
        except ValueError:
            raise ValueError(f"acks must be 0, 1, -1 or all, not {acks!r}") from None
    if acks not in (0, 1, -1):
        raise ValueError(f"acks must be 0, 1, -1 or all, not {acks!r}")
    return acks


class _Batch:
    __slots__ = (
        "attempts",
        "closed",
        "counted",
        "created",
        "deadline",
        "done",
        "encoded",
        "outcome",
        "partition",
        "producer_id",
        "records",
        "retry_at",
        "size",
        "topic",
    )

    def __init__(
        self, loop: asyncio.AbstractEventLoop, topic: str, partition: int, now: float, deadline: float
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.records: list[_Record] = []
        self.outcome = BatchOutcome(loop, topic, partition)
        self.size = _BATCH_OVERHEAD
        self.created = now
        self.deadline = deadline
        self.closed = False
        self.counted = False  # the producer's batch_counter counts it (told once how it ended)
        self.encoded: bytes | None = None
        self.attempts = 0
        self.retry_at = 0.0
        self.producer_id = -1  # the producer id it was encoded with (idempotence)
        self.done: asyncio.Future[None] = loop.create_future()


class Producer:
    """An asyncio producer. Use ``async with Producer(...) as p`` or call :meth:`close`."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        acks: int | str | None = None,
        compression: str | int = "none",
        linger_ms: float = 0,
        batch_size: int = 16384,
        client_id: str = "headwater-producer",
        retries: int = 2**31 - 1,
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30000,
        delivery_timeout_ms: int = 120000,
        max_request_size: int = 1048576,
        buffer_memory: int = 32 * 1024 * 1024,
        max_block_ms: int | None = None,
        metadata_timeout_ms: int = 60000,
        unknown_topic_timeout_ms: int = 5000,
        connect_timeout_ms: int = 10000,
        partitioner: Partitioner | None = None,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        cluster: Cluster | None = None,
        security: ClientSecurity | Mapping[str, str] | None = None,
        enable_idempotence: bool = False,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60000,
    ) -> None:
        if transactional_id is not None:
            enable_idempotence = True  # as Kafka: a transactional producer is idempotent
        self.acks = parse_acks(acks if acks is not None else ("all" if enable_idempotence else 1))
        if enable_idempotence and self.acks != -1:
            raise ValueError("enable_idempotence needs acks=all")
        self.idempotent = enable_idempotence
        self.codec = Codec(compression) if isinstance(compression, int) else codec_from_name(compression)
        if batch_size < 0 or linger_ms < 0 or max_request_size <= _BATCH_OVERHEAD:
            raise ValueError("batch_size and linger_ms must be >= 0, max_request_size larger than a batch header")
        self.linger = linger_ms / 1000.0
        self.batch_size = batch_size
        self.retries = retries
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout = delivery_timeout_ms / 1000.0
        self.max_request_size = max_request_size
        self.buffer_memory = buffer_memory
        # how long send() waits for buffer space before BufferError (Kafka's max.block.ms); None: no limit
        self.max_block = None if max_block_ms is None else max_block_ms / 1000.0
        self.partitioner: Partitioner = partitioner or DefaultPartitioner()
        self._key_serializer = key_serializer or to_bytes
        self._value_serializer = value_serializer or to_bytes
        self._owns_cluster = cluster is None
        self.cluster = cluster or Cluster(
            bootstrap,
            security=security,
            client_id=client_id,
            connect_timeout=connect_timeout_ms / 1000.0,
            request_timeout=request_timeout_ms / 1000.0,
            retry_backoff=self.retry_backoff,
            metadata_timeout=metadata_timeout_ms / 1000.0,
            unknown_topic_timeout=unknown_topic_timeout_ms / 1000.0,
            allow_auto_create_topics=True,
        )
        # the accumulator's lock: _queues, their batches, _buffered, the partitioner, _partitions
        self._lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = -1
        self._wake_scheduled = False
        self._queues: dict[tuple[str, int], collections.deque[_Batch]] = {}
        self._inflight: dict[tuple[str, int], _Batch] = {}
        self._send_lock = asyncio.Lock()
        self._wakeup = asyncio.Event()
        self._space = asyncio.Event()
        self._buffered = 0
        self._flushing = 0
        self._closing = False
        self._closed = False
        self._sender: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._refresh_task: asyncio.Task[None] | None = None
        self._next_refresh = 0.0
        self._stale_topics: set[str] = set()
        # topic -> (the TopicMetadata it was computed from, its partitions sorted, those with a leader)
        self._partitions: dict[str, tuple[Any, list[int], list[int]]] = {}
        # (headers as given, as records carry them, their size): a caller passing one headers tuple to
        # many sends (built once, e.g. per millisecond) has it converted once (read and replaced whole)
        self._headers_seen: tuple[object, Headers, int] = (None, (), 0)
        #: counts records per batch (the auditing producer): told of each batch opened and how it ended
        self.batch_counter: BatchCounter | None = None
        # idempotence: the producer id and epoch (-1: none yet), the next sequence per partition
        self._producer_id = -1
        self._producer_epoch = -1
        self._next_sequence: dict[tuple[str, int], int] = {}
        self._pid_task: asyncio.Task[None] | None = None
        #: transactions (``transactional_id``): the state machine and the coordinator's requests
        self.transaction: TransactionManager | None = (
            None if transactional_id is None else TransactionManager(self, transactional_id, transaction_timeout_ms)
        )

    @property
    def closing(self) -> bool:
        """close() was called: sends are refused."""
        return self._closing

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the sender task and connect (optional: the first send does it)."""
        if self._closing:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed")
        if self._sender is None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
            self._sender = asyncio.create_task(self._run(), name="headwater-producer-sender")
            await self.cluster.refresh()

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
        """Queue one record; the returned future resolves when the broker acknowledged it.

        Waits (here, not in the future) for the topic's metadata and for buffer space; raises
        UnknownTopicError, KafkaError(MESSAGE_TOO_LARGE), TypeError for an unserializable value.
        """
        kb, vb, hdrs, ts, size = self.prepare(value, key, headers, timestamp_ms)
        now = self.try_append(topic, kb, vb, hdrs, ts, size, partition, RecordFuture)
        if now is not None:
            return now
        return await self.append(topic, kb, vb, hdrs, ts, size, partition, RecordFuture)

    def prepare(
        self, value: Any, key: Any, headers: Iterable[tuple[str, Any]], timestamp_ms: int | None
    ) -> tuple[bytes | None, bytes | None, Headers, int, int]:
        """Serialize one record: (key, value, headers, timestamp, its size in a batch, at most).

        Raises TypeError for what the serializers refuse, KafkaError(MESSAGE_TOO_LARGE), and
        KafkaError when the producer is closed. Any thread may call it.
        """
        if self._closing:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed")
        if self.transaction is not None:
            self.transaction.check_can_send()
        # bytes and a null key skip the default serializer's call (once per record, it shows)
        ks, vs = self._key_serializer, self._value_serializer
        kb = None if key is None and ks is to_bytes else ks(key)
        vb = value if type(value) is bytes and vs is to_bytes else vs(value)
        size = _RECORD_OVERHEAD + (len(kb) if kb else 0) + (len(vb) if vb else 0)
        if headers:
            seen = self._headers_seen  # the same tuple as a record before: converted and sized then
            if headers is seen[0]:
                hdrs: Headers = seen[1]
                size += seen[2]
            else:
                hdrs = tuple([(str(k), to_bytes(v)) for k, v in headers])
                hsize = sum([len(k) + len(v or b"") + 4 for k, v in hdrs])
                size += hsize
                if type(headers) is tuple and _plain_headers(headers):
                    # immutable all through (str keys, bytes values): its conversion cannot change
                    self._headers_seen = (headers, headers, hsize)
        else:
            hdrs = ()
        if size + _BATCH_OVERHEAD > self.max_request_size:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"a record of about {size} bytes is larger than max_request_size ({self.max_request_size})",
            )
        return kb, vb, hdrs, int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms), size

    def serialized_size(self, kb: bytes | None, vb: bytes | None, hdrs: Headers) -> int:
        """A serialized record's size in a batch (at most); raises as :meth:`prepare` does."""
        if self._closing:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed")
        size = _RECORD_OVERHEAD + (len(kb) if kb else 0) + (len(vb) if vb else 0)
        if hdrs:
            size += sum([len(k) + len(v or b"") + 4 for k, v in hdrs])
        if size + _BATCH_OVERHEAD > self.max_request_size:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"a record of about {size} bytes is larger than max_request_size ({self.max_request_size})",
            )
        return size

    @staticmethod
    def serialize_headers(headers: Iterable[tuple[str, Any]]) -> Headers:
        """Headers as records carry them: (str, bytes or None) pairs."""
        return tuple([(str(k), to_bytes(v)) for k, v in headers]) if headers else ()

    def try_append(
        self,
        topic: str,
        kb: bytes | None,
        vb: bytes | None,
        hdrs: Headers,
        ts: int,
        size: int,
        partition: int | None,
        future_class: Callable[[BatchOutcome, int], F],
    ) -> F | None:
        """Append a prepared record now, from any thread; None when that would need a wait.

        Raises KafkaError when the producer is closing.

        The synchronous path, taken whenever nothing needs waiting for: the sender runs, the
        topic's metadata is known, the buffer has room and no earlier send is still waiting
        (records of one partition keep the order of send calls). Else :meth:`append` (on the loop).
        """
        if self._sender is None or self._send_lock.locked():
            return None
        with self._lock:
            if self._closing:  # read under the lock: close() fails what is queued under it, after setting this
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed")
            # the common case inline (one call less per record): the partition's open batch has room
            tm = self.cluster.topics.get(topic)
            cached = self._partitions.get(topic)
            if (
                tm is None
                or cached is None
                or cached[0] is not tm
                or (self._buffered > 0 and self._buffered + size > self.buffer_memory)
            ):
                return self._send_now(topic, kb, vb, hdrs, ts, size, partition, future_class)
            if partition is None:
                partition = self.partitioner.partition(topic, kb, cached[1], cached[2] if kb is None else cached[1])
            elif partition not in tm.partitions:
                return None  # the slow path refreshes the metadata and says UnknownTopicError
            queue = self._queues.get((topic, partition))
            if queue:
                batch = queue[-1]
                if not batch.closed and batch.size + size <= self.batch_size:
                    records = batch.records
                    fut = future_class(batch.outcome, len(records))
                    records.append((kb, vb, ts, hdrs))
                    batch.size += size
                    self._buffered += size
                    if batch.size >= self.batch_size:
                        self._close_batch(batch)
                    return fut
            return self._append(topic, partition, (kb, vb, ts, hdrs), size, future_class)

    def try_append_many(
        self,
        topic: str,
        records: Sequence[tuple[bytes | None, bytes | None]],
        hdrs: Headers,
        ts: int,
        partition: int | None,
        future_class: Callable[[BatchOutcome, int], F],
        out: list[F],
        each: bool = True,
    ) -> int:
        """Append serialized (key, value) records from ``records[0]`` on, from any thread, while none
        needs a wait; their futures go to ``out``. How many were appended (the rest: :meth:`append`).
        ``each=False``: only the first record's future per batch (a batch settles as a whole).

        One lock and one call for many records: what ``headwater produce`` sends a chunk of stdin with.
        Every record gets ``hdrs`` and timestamp ``ts``. A record too large for a request stops it too
        (:meth:`prepare` says why).
        """
        if self.transaction is not None:
            self.transaction.check_can_send()
        if self._sender is None or self._send_lock.locked():
            return 0
        hsize = sum([len(k) + len(v or b"") + 4 for k, v in hdrs]) if hdrs else 0
        limit = self.max_request_size - _BATCH_OVERHEAD - _RECORD_OVERHEAD - hsize
        batch_size = self.batch_size
        choose = self.partitioner.partition
        # a sticky partitioner keeps a null key's partition until its batch closes: no call per record
        sticky = getattr(self.partitioner, "sticky_until_new_batch", False)
        tp = -1  # the partition of ``batch``
        batch: _Batch | None = None
        outcome: BatchOutcome | None = None
        add = out.append
        n = 0
        with self._lock:
            if self._closing:  # see try_append
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed")
            tm = self.cluster.topics.get(topic)  # read once: a refresh meanwhile is seen by the next call
            cached = self._partitions.get(topic)
            room = self.buffer_memory - self._buffered  # kept here, written back before other calls
            for kb, vb in records:
                vsize = (len(kb) if kb else 0) + (len(vb) if vb else 0)
                if vsize > limit:
                    break
                size = _RECORD_OVERHEAD + hsize + vsize
                if size > room and room < self.buffer_memory:
                    break
                if tm is None or cached is None or cached[0] is not tm:
                    self._buffered = self.buffer_memory - room
                    fut = self._send_now(topic, kb, vb, hdrs, ts, size, partition, future_class)
                    room = self.buffer_memory - self._buffered
                    if fut is None:
                        break
                    add(fut)
                    n += 1
                    tm = self.cluster.topics.get(topic)
                    cached = self._partitions.get(topic)
                    batch = None
                    continue
                if partition is not None:
                    p = partition
                elif kb is None and sticky and batch is not None and not batch.closed:
                    p = tp
                else:
                    p = choose(topic, kb, cached[1], cached[2] if kb is None else cached[1])
                if p != tp or batch is None or batch.closed or batch.size + size > batch_size:
                    if partition is not None and (tm is None or partition not in tm.partitions):
                        break  # the slow path refreshes the metadata and says UnknownTopicError
                    self._buffered = self.buffer_memory - room
                    add(self._append(topic, p, (kb, vb, ts, hdrs), size, future_class))
                    room = self.buffer_memory - self._buffered
                    n += 1
                    tp = p
                    queue = self._queues.get((topic, p))
                    batch = queue[-1] if queue else None
                    outcome = batch.outcome if batch is not None else None
                    continue
                assert outcome is not None
                records_of = batch.records
                if each:
                    add(future_class(outcome, len(records_of)))
                records_of.append((kb, vb, ts, hdrs))
                batch.size += size
                room -= size
                if batch.size >= batch_size:
                    self._close_batch(batch)
                n += 1
            self._buffered = self.buffer_memory - room
        return n

    async def append(
        self,
        topic: str,
        kb: bytes | None,
        vb: bytes | None,
        hdrs: Headers,
        ts: int,
        size: int,
        partition: int | None,
        future_class: Callable[[BatchOutcome, int], F],
    ) -> F:
        """Append a prepared record, waiting for the sender, the topic's metadata and buffer space.

        Raises BufferError when the buffer stays full for ``max_block_ms``.
        """
        async with self._send_lock:
            if self._closing:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed")
            if self._sender is None:
                await self.start()
            if self._buffered > 0 and self._buffered + size > self.buffer_memory:
                await self._wait_for_space(size)
            tm = await self.cluster.topic_metadata(topic)
            if self._closing:  # closed while this send waited for space or metadata
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed")
            partitions = sorted(tm.partitions)
            if partition is None:
                # keyed records ignore availability; only the null-key (sticky) choice needs it
                available = [p for p in partitions if self.cluster.leader(topic, p) >= 0] if kb is None else partitions
                partition = self.partitioner.partition(topic, kb, partitions, available)
            elif partition not in tm.partitions:
                await self.cluster.refresh([topic])
                tm = self.cluster.topics.get(topic, tm)
                if partition not in tm.partitions:
                    raise UnknownTopicError(topic, partition)
            with self._lock:
                return self._append(topic, partition, (kb, vb, ts, hdrs), size, future_class)

    async def _wait_for_space(self, size: int) -> None:
        try:
            async with asyncio.timeout(self.max_block):
                while self._buffered > 0 and self._buffered + size > self.buffer_memory:
                    self._space.clear()
                    await self._space.wait()
        except TimeoutError:
            raise BufferError(
                f"the producer's buffer ({self.buffer_memory} bytes, buffer_memory) stayed full for "
                f"{self.max_block:g}s (max_block_ms): the brokers take records slower than they are sent"
            ) from None

    def _send_now(
        self,
        topic: str,
        kb: bytes | None,
        vb: bytes | None,
        hdrs: Headers,
        ts: int,
        size: int,
        partition: int | None,
        future_class: Callable[[BatchOutcome, int], F],
    ) -> F | None:
        """Append the record at once, or None when that would need a wait (metadata, buffer space).

        Holds ``_lock``."""
        tm = self.cluster.topics.get(topic)
        if tm is None or not tm.partitions:
            return None
        if self._buffered > 0 and self._buffered + size > self.buffer_memory:
            return None
        cached = self._partitions.get(topic)
        if cached is None or cached[0] is not tm:
            # per metadata refresh, not per record: a refresh replaces the TopicMetadata
            partitions = sorted(tm.partitions)
            available = [p for p in partitions if self.cluster.leader(topic, p) >= 0]
            cached = self._partitions[topic] = (tm, partitions, available)
        _, partitions, available = cached
        if partition is None:
            partition = self.partitioner.partition(topic, kb, partitions, available if kb is None else partitions)
        elif partition not in tm.partitions:
            return None  # the slow path refreshes the metadata and says UnknownTopicError
        return self._append(topic, partition, (kb, vb, ts, hdrs), size, future_class)

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

    def _append(
        self, topic: str, partition: int, record: _Record, size: int, future_class: Callable[[BatchOutcome, int], F]
    ) -> F:
        """Add the record to its partition's open batch (holds ``_lock``)."""
        tp = (topic, partition)
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = collections.deque()
        batch = queue[-1] if queue and not queue[-1].closed else None
        if batch is not None and batch.size + size > self.batch_size:
            self._close_batch(batch)
            batch = None
        if batch is None:
            assert self._loop is not None  # started
            now = time.monotonic()
            batch = _Batch(self._loop, topic, partition, now, now + self.delivery_timeout)
            if self.batch_counter is not None:
                batch.counted = self.batch_counter.opened(topic, batch.outcome, record[2])
            queue.append(batch)
            self._wake()  # a new linger deadline
        fut = future_class(batch.outcome, len(batch.records))
        batch.records.append(record)
        batch.size += size
        self._buffered += size
        if batch.size >= self.batch_size:
            self._close_batch(batch)
        return fut

    def _close_batch(self, batch: _Batch) -> None:
        if not batch.closed:
            batch.closed = True
            self.partitioner.on_new_batch(batch.topic, batch.partition)
            self._wake()

    def _wake(self) -> None:
        """Wake the sender, from any thread (another thread's wake-ups are coalesced into one)."""
        if threading.get_ident() == self._loop_thread:
            self._wakeup.set()
        elif not self._wake_scheduled and self._loop is not None:
            self._wake_scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._woken)
            except RuntimeError:  # the loop is closed: nothing left to wake
                self._wake_scheduled = False

    def _woken(self) -> None:
        self._wake_scheduled = False
        self._wakeup.set()

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until each of those records is acknowledged or failed."""
        with self._lock:
            waits = [b.done for q in self._queues.values() for b in q] + [b.done for b in self._inflight.values()]
        if not waits:
            return
        self._flushing += 1
        self._wakeup.set()
        try:
            _, pending = await asyncio.wait(waits, timeout=timeout)
        finally:
            self._flushing -= 1
        if pending:
            raise KafkaTimeoutError(f"flush did not complete within {timeout:g}s ({len(pending)} batches pending)")

    def _fail_queued(self, tps: set[tuple[str, int]], error: BaseException) -> None:
        """Fail the queued batches of ``tps`` (their AddPartitionsToTxn failed)."""
        with self._lock:
            for tp in tps:
                queue = self._queues.pop(tp, None)
                for b in queue or ():
                    self._fail(b, error)

    # -- transactions (Kafka's KafkaProducer transactional API) ------------------------------------

    def _txn(self) -> TransactionManager:
        if self.transaction is None:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, "the producer has no transactional_id")
        return self.transaction

    async def init_transactions(self) -> None:
        """Find the transaction coordinator and take the transactional id's producer id and a new
        epoch (InitProducerId): fences older producers of the id, aborting their open transaction."""
        txn = self._txn()
        await self.start()
        await txn.init_transactions()

    def begin_transaction(self) -> None:
        self._txn().begin_transaction()

    async def send_offsets_to_transaction(self, offsets: Mapping[tuple[str, int], int], group_id: str) -> None:
        """Commit ``group_id``'s offsets ((topic, partition) -> the next offset to read) in the open
        transaction: AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator."""
        await self._txn().send_offsets_to_transaction(offsets, group_id)

    async def commit_transaction(self) -> None:
        """Flush, then EndTxn(commit). Raises when a record failed (then abort_transaction)."""
        await self._txn().commit_transaction()

    async def abort_transaction(self) -> None:
        """Flush (the records settle), then EndTxn(abort): read_committed consumers never see them."""
        await self._txn().abort_transaction()

    async def close(self, timeout: float | None = None) -> None:
        """Flush, stop the sender and close the connections. Records not delivered in ``timeout`` fail."""
        if self._closed:
            return
        self._closing = True
        try:
            if self._sender is not None:
                with contextlib.suppress(KafkaTimeoutError):
                    await self.flush(timeout)
        finally:
            self._closed = True
            self._wakeup.set()
            error = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer was closed before the record was sent")
            with self._lock:
                for q in self._queues.values():
                    for b in q:
                        self._fail(b, error)
                self._queues.clear()
            # taken before the cancel: a cancelled request's ``finally`` drops its batches from
            # ``_inflight`` (a flush that timed out leaves requests in flight)
            inflight = list(self._inflight.values())
            add = None if self.transaction is None else self.transaction._add_task
            tasks = [t for t in (self._sender, self._refresh_task, self._pid_task, add, *self._tasks) if t is not None]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for b in inflight + list(self._inflight.values()):
                if not b.done.done():  # not answered meanwhile
                    self._fail(b, error)
            if self._owns_cluster:
                await self.cluster.close()

    # -- the sender ------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._closed:
            try:
                with self._lock:
                    ready = self._take_ready()
                timeout = self._send_batches(*ready)
            except Exception:  # a bug: never leave records hanging silently
                log.exception("producer sender failed")
                timeout = self.retry_backoff
            self._wakeup.clear()
            if timeout is None:
                await self._wakeup.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(timeout, 0.0)):
                        await self._wakeup.wait()

    def _take_ready(self) -> tuple[dict[int, list[_Batch]], float, float | None]:
        """Take every ready batch off its queue (holds ``_lock``): by leader, now, the next wake-up."""
        now = time.monotonic()
        next_wake: float | None = None
        flushing = self._flushing > 0 or self._closing
        by_node: dict[int, list[_Batch]] = {}
        for tp, queue in list(self._queues.items()):
            while queue and queue[0].deadline <= now:
                expired = queue.popleft()
                self._fail(
                    expired,
                    KafkaTimeoutError(
                        f"{len(expired.records)} record(s) for {tp[0]}-{tp[1]} expired after "
                        f"{now - expired.created:.1f}s without being acknowledged"
                    ),
                )
            if not queue:
                del self._queues[tp]
                continue
            if tp in self._inflight:
                continue
            batch = queue[0]
            due = batch.retry_at if batch.closed or flushing else max(batch.retry_at, batch.created + self.linger)
            if due > now:
                next_wake = due if next_wake is None else min(next_wake, due)
                continue
            leader = self.cluster.leader(*tp)
            if leader < 0:
                self._stale_topics.add(tp[0])
                continue
            txn = self.transaction
            if txn is not None and batch.encoded is None:
                if not txn.sending():  # aborting or failed: never sent (Java's abortUndrainedBatches)
                    error = txn.undrained_error()
                    while queue and queue[0].encoded is None:
                        self._fail(queue.popleft(), error)
                    continue
                if self._producer_id < 0 or not txn.need_partition(tp):
                    continue  # AddPartitionsToTxn first: it wakes the sender when answered
            elif self.idempotent and batch.encoded is None and self._producer_id < 0:
                self._init_producer_id()  # wakes the sender when it has one
                continue
            queue.popleft()
            self._close_batch(batch)
            self._inflight[tp] = batch
            by_node.setdefault(leader, []).append(batch)
        # the earliest delivery deadline, so expiry happens on time
        for queue in self._queues.values():
            if queue:
                d = queue[0].deadline
                next_wake = d if next_wake is None else min(next_wake, d)
        return by_node, now, next_wake

    def _send_batches(self, by_node: dict[int, list[_Batch]], now: float, next_wake: float | None) -> float | None:
        """Start requests for the batches taken; the seconds until something else becomes ready."""
        for node, batches in by_node.items():
            for request in self._split(batches):
                self._spawn(self._send_request(node, request))
        if self._stale_topics:
            if self._refresh_task is None and now >= self._next_refresh:
                self._refresh_task = asyncio.create_task(self._refresh(), name="headwater-producer-metadata")
            wait = max(self._next_refresh - now, self.retry_backoff)
            next_wake = now + wait if next_wake is None else min(next_wake, now + wait)
        return None if next_wake is None else next_wake - now

    def _split(self, batches: list[_Batch]) -> list[list[_Batch]]:
        out: list[list[_Batch]] = []
        current: list[_Batch] = []
        size = 0
        for b in batches:
            if b.encoded is None:
                try:
                    b.encoded = self._encode(b)
                except (KafkaError, ValueError, OverflowError) as e:  # e.g. a timestamp out of range
                    del self._inflight[(b.topic, b.partition)]
                    with self._lock:
                        self._fail(b, e if isinstance(e, KafkaError) else KafkaError(ErrorCode.CORRUPT_MESSAGE, str(e)))
                    continue
            n = len(b.encoded) + 64
            if current and size + n > self.max_request_size:
                out.append(current)
                current, size = [], 0
            current.append(b)
            size += n
        if current:
            out.append(current)
        return out

    def _encode(self, b: _Batch) -> bytes:
        if not self.idempotent:
            return encode_batch(b.records, compression=self.codec)
        tp = (b.topic, b.partition)
        seq = self._next_sequence.get(tp, 0)
        data = encode_batch(
            b.records,
            compression=self.codec,
            producer_id=self._producer_id,
            producer_epoch=self._producer_epoch,
            base_sequence=seq,
            transactional=self.transaction is not None,
        )
        self._next_sequence[tp] = (seq + len(b.records)) % _SEQUENCE_SPACE
        b.producer_id = self._producer_id
        return data

    def _init_producer_id(self) -> None:
        if self._pid_task is None and not self._closed:
            self._pid_task = asyncio.create_task(self._fetch_producer_id(), name="headwater-producer-init-pid")

    async def _fetch_producer_id(self) -> None:
        """InitProducerId from any broker, retried with backoff until it succeeds or the producer closes."""
        try:
            while not self._closed:
                try:
                    resp = await self.cluster.request(
                        None, INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000}
                    )
                    code = ErrorCode.of(resp["error_code"])
                    if code is ErrorCode.NONE:
                        self._producer_id, self._producer_epoch = resp["producer_id"], resp["producer_epoch"]
                        self._next_sequence.clear()
                        log.info("idempotent producer id %d, epoch %d", self._producer_id, self._producer_epoch)
                        return
                    log.warning("InitProducerId failed: %s", code.name)
                except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as e:
                    log.warning("InitProducerId failed: %s", e)
                await asyncio.sleep(self.retry_backoff)
        finally:
            self._pid_task = None
            self._wakeup.set()

    def _reset_producer_id(self, batch: _Batch) -> None:
        """Take a new producer id for the batches after ``batch`` (unless that already happened)."""
        if self.transaction is not None:  # the transaction must be aborted (a new id would break it)
            return
        if self.idempotent and batch.producer_id >= 0 and batch.producer_id == self._producer_id:
            log.info("resetting idempotent producer id %d after a failed batch", self._producer_id)
            self._producer_id = -1
            self._next_sequence.clear()

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _refresh(self) -> None:
        topics = set(self._stale_topics)
        self._stale_topics.clear()
        try:
            await self.cluster.refresh(topics)
        except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as e:
            log.warning("metadata refresh failed: %s", e)
            self._stale_topics.update(topics)
        finally:
            self._next_refresh = time.monotonic() + self.retry_backoff
            self._refresh_task = None
            self._wakeup.set()

    async def _send_request(self, node: int, batches: list[_Batch]) -> None:
        by_tp = {(b.topic, b.partition): b for b in batches}
        topics: dict[str, list[dict[str, Any]]] = {}
        for b in batches:
            topics.setdefault(b.topic, []).append({"partition_index": b.partition, "records": b.encoded})
        body = {
            "transactional_id": None if self.transaction is None else self.transaction.transactional_id,
            "acks": self.acks,
            "timeout_ms": self.request_timeout_ms,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        try:
            try:
                conn = await self.cluster.connection(node)
                version = conn.version_for(PRODUCE, min_version=3)  # record batches (magic 2) need v3
                if self.codec == Codec.ZSTD:
                    version = conn.version_for(PRODUCE, min_version=7)
                if self.acks == 0:
                    await conn.request(PRODUCE, body, version, expect_response=False)
                    for b in batches:
                        self._complete(b, -1, -1)
                    return
                # a little longer than the broker's own timeout_ms, but not past the batches' deadlines
                patience = self.request_timeout_ms / 1000.0 + 1.0
                remaining = max(b.deadline for b in batches) - time.monotonic()
                response = await conn.request(PRODUCE, body, version, timeout=max(min(patience, remaining), 0.05))
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                for b in batches:
                    self._retry_or_fail(b, e, stale=True)
                return
            except KafkaError as e:
                for b in batches:
                    self._retry_or_fail(b, e, stale=e.code in STALE_METADATA_ERRORS)
                return
            for t in response["responses"]:
                for p in t["partitions"]:
                    answered = by_tp.pop((t["name"], p["partition_index"]), None)
                    if answered is None:
                        continue
                    b = answered
                    code = ErrorCode.of(p["error_code"])
                    if code is ErrorCode.NONE:
                        self._complete(b, p["base_offset"], p.get("log_append_time_ms", -1))
                    elif code is ErrorCode.DUPLICATE_SEQUENCE_NUMBER and self.idempotent:
                        self._complete(b, -1, -1)  # written before; its offset is not known
                    elif code is ErrorCode.UNKNOWN_PRODUCER_ID and self.idempotent and self.transaction is None:
                        self._reset_producer_id(b)
                        b.encoded = None  # encoded again under the new producer id, from sequence 0
                        error = KafkaError(code, f"producing to {b.topic}-{b.partition}: {code.name}")
                        self._retry_or_fail(b, error, stale=False, retriable=True)
                    else:
                        error = KafkaError(code, f"producing to {b.topic}-{b.partition}: {code.name}")
                        self._retry_or_fail(b, error, stale=code in STALE_METADATA_ERRORS)
            for b in by_tp.values():
                self._fail(b, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {b.topic}-{b.partition}"))
        finally:
            for b in batches:
                if self._inflight.get((b.topic, b.partition)) is b:
                    del self._inflight[(b.topic, b.partition)]
            self._wakeup.set()

    def _retry_or_fail(self, batch: _Batch, error: Exception, *, stale: bool, retriable: bool = False) -> None:
        retriable = (
            retriable
            or isinstance(error, KafkaConnectionError | KafkaTimeoutError)
            or (isinstance(error, KafkaError) and error.retriable)
        )
        now = time.monotonic()
        if (
            retriable
            and not self._closed
            and batch.attempts < self.retries
            and now + self.retry_backoff < batch.deadline
        ):
            batch.attempts += 1
            batch.retry_at = now + self.retry_backoff
            log.debug("retrying %s-%s (attempt %d): %s", batch.topic, batch.partition, batch.attempts, error)
            tp = (batch.topic, batch.partition)
            with self._lock:
                queue = self._queues.get(tp)
                if queue is None:
                    queue = self._queues[tp] = collections.deque()
                queue.appendleft(batch)
            if stale:
                self._stale_topics.add(batch.topic)
            return
        self._fail(batch, error)

    def _complete(self, batch: _Batch, base_offset: int, log_append_time: int) -> None:
        timestamps = [r[2] for r in batch.records]
        if batch.counted and self.batch_counter is not None:
            batch.counted = False  # counted once (before the futures settle: a waiter sees the count)
            self.batch_counter.acknowledged(batch.topic, batch.outcome, timestamps)
        batch.outcome.succeeded(base_offset, log_append_time, timestamps)
        self._finish(batch)

    def _fail(self, batch: _Batch, error: BaseException) -> None:
        if self.transaction is not None:
            self.transaction.fail(error)  # abortable, or fatal when fenced
        if batch.encoded is not None:
            self._reset_producer_id(batch)
        if batch.counted and self.batch_counter is not None:
            batch.counted = False
            self.batch_counter.failed(batch.outcome)
        batch.outcome.failed(error)
        self._finish(batch)

    def _finish(self, batch: _Batch) -> None:
        if not batch.done.done():
            batch.done.set_result(None)
            with self._lock:
                self._buffered -= batch.size - _BATCH_OVERHEAD
            self._space.set()
