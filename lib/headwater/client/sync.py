"""A thin synchronous facade over the asyncio client.

Each facade object owns a private event loop running on a daemon thread (uvloop when installed);
its methods submit coroutines to that loop and block on the result. ``SyncProducer.send`` does not
block: it appends the record in the calling thread and returns a
:class:`~headwater.client.record_future.SyncRecordFuture` of its RecordMetadata. Sends from one
thread keep their order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Coroutine, Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, TypeVar

from headwater.client.admin import Admin, ConfigEntry, LogDirInfo, NewTopic, TopicDescription
from headwater.client.consumer import Consumer, ConsumerRecord, FetchResult, OffsetAndTimestamp, Subscription
from headwater.client.errors import KafkaTimeoutError
from headwater.client.producer import Headers, Producer, RecordMetadata, to_bytes
from headwater.client.record_future import SyncRecordFuture
from headwater.protocol.errors import ErrorCode, KafkaError

__all__ = ["EventLoopThread", "SyncAdmin", "SyncConsumer", "SyncProducer", "SyncSubscription"]

T = TypeVar("T")

_MANY_STEP = 256  # records appended per lock hold by send_many
_MAX_BLOCK_MS = 60000  # Kafka's max.block.ms default: how long send() may wait for buffer space


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a runtime dependency
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class EventLoopThread:
    """An asyncio event loop running forever on its own daemon thread."""

    def __init__(self, name: str = "headwater-client") -> None:
        self.loop = _new_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    @property
    def thread_id(self) -> int | None:
        return self._thread.ident

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (cancelled if ``timeout`` passes)."""
        fut = self.submit(coro)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise KafkaTimeoutError(f"operation did not complete within {timeout:g}s") from None
        except BaseException:
            fut.cancel()
            raise

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


async def _construct(cls: type[T], *args: Any, **kwargs: Any) -> T:
    return cls(*args, **kwargs)  # inside the loop: asyncio primitives bind to it


class _Facade:
    def __init__(self) -> None:
        self._lt = EventLoopThread()
        self._closed = False

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self._lt.run(coro, timeout)

    def _shutdown(self, close: Coroutine[Any, Any, None], timeout: float | None) -> None:
        if self._closed:
            close.close()
            return
        self._closed = True
        try:
            self._lt.run(close, timeout)
        finally:
            self._lt.stop()

    def __del__(self) -> None:  # a facade forgotten without close(): at least stop the thread
        lt = getattr(self, "_lt", None)
        if lt is not None and not getattr(self, "_closed", True):
            try:
                lt.loop.call_soon_threadsafe(lt.loop.stop)
            except RuntimeError:  # the loop is already closed
                pass


class SyncProducer(_Facade):
    """Blocking facade of :class:`~headwater.client.producer.Producer` (same arguments).

    :meth:`send` serializes and partitions the record in the calling thread and appends it to
    its partition's open batch (the producer's accumulator takes a lock for that, see
    :mod:`headwater.client.producer`); the loop thread only drains whole batches, as Java's
    ``KafkaProducer`` sender thread does. No per-record hop between threads: the calling thread
    waits for the loop only when a send must wait (the topic's metadata is not known yet, the
    buffer is full, an earlier send still waits). Sends from one thread keep their order;
    any number of threads may send at once.

    ``buffer_memory`` bounds the bytes waiting to be sent: a full buffer blocks :meth:`send` up
    to ``max_block_ms`` (default 60,000, Kafka's ``max.block.ms``), then it raises BufferError.
    """

    #: what the loop thread builds; a subclass may name a Producer with the same API
    producer_class: Any = Producer

    def __init__(self, bootstrap: str | Sequence[str] | None, **kwargs: Any) -> None:
        super().__init__()
        if "producer" not in kwargs:
            kwargs.setdefault("max_block_ms", _MAX_BLOCK_MS)
        try:
            self.producer: Producer = self._run(_construct(self.producer_class, bootstrap, **kwargs))
        except BaseException:
            self._lt.stop()
            raise
        self._accumulator: Producer = self.producer

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, timeout: float | None = None) -> None:
        """Connect now (else the first send does): fails early on an unreachable cluster."""
        self._run(self.producer.start(), timeout)

    def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        headers: Iterable[tuple[str, Any]] = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> SyncRecordFuture:
        """Queue one record; the future resolves to its RecordMetadata or raises its error.

        Errors of the record itself (a value the serializer refuses, MESSAGE_TOO_LARGE, an unknown
        topic or partition, the producer closed) come through the future too; only a buffer that
        stays full raises here (BufferError).
        """
        p = self._accumulator
        try:
            kb, vb, hdrs, ts, size = p.prepare(value, key, headers, timestamp_ms)
            fut = p.try_append(topic, kb, vb, hdrs, ts, size, partition, SyncRecordFuture)
            if fut is None:
                fut = self._append_waiting(topic, kb, vb, hdrs, ts, size, partition)
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
        """Queue many records at once, in order: what ``[send(...) for ...]`` does, in one call.

        The records share ``headers`` and the timestamp (default: now, once). A record that must
        wait (buffer space, metadata) or is refused goes through :meth:`send` and the rest follow it.
        ``per_record=False`` returns fewer futures, enough to see every failure: one per batch the
        records went to (a batch succeeds or fails as a whole), and each refused record's.
        """
        p = self._accumulator
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        try:
            hdrs = p.serialize_headers(headers)
            ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
            if p.closing:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed")
        except Exception as e:
            return [SyncRecordFuture.failed(self._lt.loop, topic, e) for _ in values]
        ks, vs = p._key_serializer, p._value_serializer
        if (
            ks is to_bytes
            and vs is to_bytes
            and set(map(type, values)) <= {bytes}
            and (keys is None or set(map(type, keys)) <= {bytes, type(None)})
        ):
            records: Sequence[tuple[Any, Any]] = list(zip(keys if keys is not None else repeat(None), values))
        else:
            records = [(None, v) for v in values] if keys is None else list(zip(keys, values))
            try:
                records = [(ks(k), vs(v)) for k, v in records]
            except Exception:  # one by one: the bad ones get failed futures
                return [self.send(topic, v, k, hdrs, partition, ts) for k, v in records]
        out: list[SyncRecordFuture] = []
        i = 0
        while i < len(records):
            # a slice at a time: the accumulator's lock (which the sender takes too) is held per call
            step = min(len(records) - i, _MANY_STEP)
            try:
                taken = p.try_append_many(
                    topic, records[i : i + step], hdrs, ts, partition, SyncRecordFuture, out, per_record
                )
            except KafkaError as e:  # closed meanwhile: the rest fail, as send() would fail them
                out.extend(SyncRecordFuture.failed(self._lt.loop, topic, e) for _ in records[i:])
                break
            i += taken
            if taken < step:  # this one waits (or fails): alone, then the rest again in bulk
                kb, vb = records[i]
                out.append(self._send_serialized(topic, kb, vb, hdrs, ts, partition))
                i += 1
        return out

    def _send_serialized(
        self, topic: str, kb: bytes | None, vb: bytes | None, hdrs: Headers, ts: int, partition: int | None
    ) -> SyncRecordFuture:
        """:meth:`send` for a record already serialized (its size checked here, as prepare does)."""
        p = self._accumulator
        try:
            size = p.serialized_size(kb, vb, hdrs)
            fut = p.try_append(topic, kb, vb, hdrs, ts, size, partition, SyncRecordFuture)
            if fut is None:
                fut = self._append_waiting(topic, kb, vb, hdrs, ts, size, partition)
        except BufferError:
            raise
        except Exception as e:  # delivered through the future, like every other error
            return SyncRecordFuture.failed(self._lt.loop, topic, e)
        return fut

    def _append_waiting(
        self,
        topic: str,
        kb: bytes | None,
        vb: bytes | None,
        hdrs: Headers,
        ts: int,
        size: int,
        partition: int | None,
        future_class: Any = SyncRecordFuture,
    ) -> SyncRecordFuture:
        """The slow path: wait on the loop for what the append needs (metadata, buffer space)."""
        if threading.get_ident() == self._lt.thread_id:
            raise KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                "send() from a delivery callback would wait for the client's own thread "
                "(the topic's metadata or buffer space): send from another thread",
            )
        fut: SyncRecordFuture = self._run(
            self._accumulator.append(topic, kb, vb, hdrs, ts, size, partition, future_class)
        )
        return fut

    def send_and_wait(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        headers: Iterable[tuple[str, Any]] = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
        timeout: float | None = None,
    ) -> RecordMetadata:
        return self.send(topic, value, key, headers, partition, timestamp_ms).result(timeout)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every record sent so far (by any thread) is acknowledged or failed."""
        self._run(self.producer.flush(timeout))

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout``), fail what is left, stop the loop thread. Later sends fail."""
        self._shutdown(self.producer.close(timeout), None)


class SyncSubscription:
    def __init__(self, facade: SyncConsumer, subscription: Subscription) -> None:
        self._facade = facade
        self.subscription = subscription

    @property
    def positions(self) -> dict[int, int]:
        return dict(self.subscription.positions)

    def poll(self, max_wait_ms: int | None = None) -> list[ConsumerRecord]:
        return self._facade._run(self.subscription.poll(max_wait_ms))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while True:
            yield from self.poll()


class SyncConsumer(_Facade):
    """Blocking facade of :class:`~headwater.client.consumer.Consumer` (same arguments)."""

    def __init__(self, bootstrap: str | Sequence[str], **kwargs: Any) -> None:
        super().__init__()
        try:
            self.consumer: Consumer = self._run(_construct(Consumer, bootstrap, **kwargs))
        except BaseException:
            self._lt.stop()
            raise

    def __enter__(self) -> SyncConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._shutdown(self.consumer.close(), 10.0)

    def partitions_for(self, topic: str) -> list[int]:
        return self._run(self.consumer.partitions_for(topic))

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = 1048576,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
    ) -> FetchResult:
        return self._run(self.consumer.fetch(topic, partition, offset, max_bytes, max_wait_ms, min_bytes))

    def fetch_many(
        self, requests: Iterable[tuple[str, int, int]], *, max_bytes: int = 1048576, max_wait_ms: int = 500
    ) -> dict[tuple[str, int], FetchResult]:
        return self._run(self.consumer.fetch_many(list(requests), max_bytes=max_bytes, max_wait_ms=max_wait_ms))

    def offsets_before(self, topic: str, partition: int, time: int, max_offsets: int = 1) -> list[int]:
        return self._run(self.consumer.offsets_before(topic, partition, time, max_offsets))

    def list_offset(self, topic: str, partition: int, timestamp: int) -> OffsetAndTimestamp:
        return self._run(self.consumer.list_offset(topic, partition, timestamp))

    def follow(
        self,
        topic: str,
        partitions: int | Sequence[int] | None = None,
        start: str | int = "latest",
        *,
        max_wait_ms: int = 500,
        max_bytes: int = 1048576,
    ) -> SyncSubscription:
        return SyncSubscription(
            self, self.consumer.follow(topic, partitions, start, max_wait_ms=max_wait_ms, max_bytes=max_bytes)
        )


class SyncAdmin(_Facade):
    """Blocking facade of :class:`~headwater.client.admin.Admin` (same arguments)."""

    def __init__(self, bootstrap: str | Sequence[str], **kwargs: Any) -> None:
        super().__init__()
        try:
            self.admin: Admin = self._run(_construct(Admin, bootstrap, **kwargs))
        except BaseException:
            self._lt.stop()
            raise

    def __enter__(self) -> SyncAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._shutdown(self.admin.close(), 10.0)

    def create_topics(
        self, topics: Iterable[NewTopic], *, timeout_ms: int = 30000, validate_only: bool = False
    ) -> dict[str, KafkaError | None]:
        return self._run(self.admin.create_topics(list(topics), timeout_ms=timeout_ms, validate_only=validate_only))

    def create_topic(
        self,
        name: str,
        num_partitions: int = 1,
        replication_factor: int = 1,
        configs: Mapping[str, str] | None = None,
        *,
        timeout_ms: int = 30000,
    ) -> None:
        self._run(self.admin.create_topic(name, num_partitions, replication_factor, configs, timeout_ms=timeout_ms))

    def create_partitions(
        self, new_counts: Mapping[str, int], *, timeout_ms: int = 30000, validate_only: bool = False
    ) -> dict[str, KafkaError | None]:
        return self._run(
            self.admin.create_partitions(dict(new_counts), timeout_ms=timeout_ms, validate_only=validate_only)
        )

    def alter_topic_configs(
        self,
        topic: str,
        set_configs: Mapping[str, str] | None = None,
        delete_configs: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        self._run(self.admin.alter_topic_configs(topic, set_configs, list(delete_configs), validate_only=validate_only))

    def describe_broker_configs(self, broker_id: int | None) -> dict[str, ConfigEntry]:
        return self._run(self.admin.describe_broker_configs(broker_id))

    def alter_broker_configs(
        self,
        broker_id: int | None,
        set_configs: Mapping[str, str] | None = None,
        delete_configs: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        self._run(
            self.admin.alter_broker_configs(broker_id, set_configs, list(delete_configs), validate_only=validate_only)
        )

    def delete_records(
        self, offsets: Mapping[tuple[str, int], int], *, timeout_ms: int = 30000
    ) -> dict[tuple[str, int], int | KafkaError]:
        return self._run(self.admin.delete_records(dict(offsets), timeout_ms=timeout_ms))

    def describe_log_dirs(
        self, broker_ids: Iterable[int] | None = None, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[int, list[LogDirInfo] | KafkaError]:
        return self._run(self.admin.describe_log_dirs(broker_ids, partitions))

    def elect_leaders(
        self, partitions: Iterable[tuple[str, int]] | None = None, *, unclean: bool = False, timeout_ms: int = 30000
    ) -> dict[tuple[str, int], KafkaError | None]:
        return self._run(self.admin.elect_leaders(partitions, unclean=unclean, timeout_ms=timeout_ms))

    def delete_topics(self, names: Iterable[str], *, timeout_ms: int = 30000) -> dict[str, KafkaError | None]:
        return self._run(self.admin.delete_topics(list(names), timeout_ms=timeout_ms))

    def delete_topic(self, name: str, *, timeout_ms: int = 30000) -> None:
        self._run(self.admin.delete_topic(name, timeout_ms=timeout_ms))

    def list_topics(self, *, include_internal: bool = True) -> list[str]:
        return self._run(self.admin.list_topics(include_internal=include_internal))

    def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        return self._run(self.admin.describe_topics(None if names is None else list(names)))

    def describe_configs(self, topic: str, keys: Iterable[str] | None = None) -> dict[str, ConfigEntry]:
        return self._run(self.admin.describe_configs(topic, None if keys is None else list(keys)))

    def wait_for_topic(self, name: str, *, timeout: float = 30.0, exists: bool = True) -> None:
        self._run(self.admin.wait_for_topic(name, timeout=timeout, exists=exists))
