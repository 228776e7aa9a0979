"""The seeds' high-level consumer: consumer groups coordinated through ZooKeeper.

ZooKeeper layout (the seeds' "ZooKeeper directory structure", as Kafka 0.8 wrote it)::

    /consumers/<group>/ids/<consumer id>        ephemeral  {"version":1,"subscription":{topic: n},
                                                            "pattern":"static"|"white_list"|"black_list",
                                                            "timestamp":"<ms>"}
    /consumers/<group>/owners/<topic>/<p>       ephemeral  the owning consumer thread id
    /consumers/<group>/offsets/<topic>/<p>      persistent the next offset to consume (decimal)

A connector registers itself, watches the group's members, the brokers and (for a topic filter) the
topics, and on every change rebalances: it stops fetching, commits what its streams consumed, releases
its owner nodes, computes Algorithm 1 (:mod:`headwater.client.rebalance`) from what ZooKeeper says,
claims its partitions (backing off and retrying while a previous owner still holds one), reads their
offsets and fetches again. Records reach the caller through :class:`KafkaStream` blocking iterators.

Delivery is at least once: a record counts as consumed once the caller asks its stream for the next
one (or times out, or calls :meth:`ZookeeperConsumerConnector.commit_offsets` / ``shutdown``), so a
crash while handling a record redelivers it; a clean rebalance waits (``rebalance_drain_ms``) for
records in hand to be finished and redelivers nothing.

The blocking API runs kazoo's threads, one rebalance thread, one auto-commit thread and an asyncio
loop thread with one fetch task per owned partition (built on :class:`~headwater.client.Consumer`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from headwater.client.consumer import EARLIEST, LATEST, Consumer, ConsumerRecord
from headwater.client.errors import KafkaTimeoutError, OffsetOutOfRangeError
from headwater.client.rebalance import ConsumerThreadId, range_assign, thread_ids
from headwater.client.sync import EventLoopThread
from headwater.zk import brokers as zkbrokers
from headwater.zk.client import kazoo_client, split_chroot
from headwater.zk.consumers import (
    ConsumerRegistration,
    decode_offset,
    decode_owner,
    decode_registration,
    encode_offset,
    encode_owner,
)
from headwater.zk.json import ZnodeFormatError
from headwater.zk.paths import (
    BROKER_IDS,
    BROKER_TOPICS,
    broker_path,
    consumer_ids_path,
    consumer_offset_path,
    consumer_offsets_path,
    consumer_owner_path,
    consumer_owners_path,
    topic_path,
)
from headwater.zk.topics import decode_assignment

log = logging.getLogger("headwater.client.zk_consumer")

__all__ = [
    "Blacklist",
    "ConsumerRebalanceFailedError",
    "ConsumerTimeoutError",
    "KafkaStream",
    "TopicFilter",
    "Whitelist",
    "ZookeeperConsumerConnector",
    "broker_addresses",
    "consume",
]

#: Topics a filter never matches (Kafka excludes its internal offsets topic the same way).
INTERNAL_TOPICS = frozenset({"__consumer_offsets"})


class ConsumerTimeoutError(KafkaTimeoutError):
    """No record arrived on a stream within ``consumer_timeout_ms``; the stream stays usable."""


class ConsumerRebalanceFailedError(RuntimeError):
    """The connector could not claim its partitions in ``rebalance_max_retries`` attempts."""


# -- topic filters -------------------------------------------------------------------------------


class TopicFilter:
    """A regular expression over topic names (commas mean "or", as in Kafka)."""

    pattern_name = ""

    def __init__(self, regex: str) -> None:
        self.regex = regex
        self._re = re.compile(regex.strip().replace(",", "|"))

    def matches(self, topic: str) -> bool:
        return self._re.fullmatch(topic) is not None

    def is_allowed(self, topic: str) -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.regex!r})"


class Whitelist(TopicFilter):
    """Topics whose whole name matches the regex."""

    pattern_name = "white_list"

    def is_allowed(self, topic: str) -> bool:
        return topic not in INTERNAL_TOPICS and self.matches(topic)


class Blacklist(TopicFilter):
    """Topics whose name does not match the regex."""

    pattern_name = "black_list"

    def is_allowed(self, topic: str) -> bool:
        return topic not in INTERNAL_TOPICS and not self.matches(topic)


def _filter_for(pattern: str, regex: str) -> TopicFilter | None:
    if pattern == Whitelist.pattern_name:
        return Whitelist(regex)
    if pattern == Blacklist.pattern_name:
        return Blacklist(regex)
    return None


# -- ZooKeeper helpers ---------------------------------------------------------------------------


def broker_addresses(zk: KazooClient) -> dict[int, str]:
    """``{broker id: "host:port"}`` from the registrations under ``/brokers/ids``."""
    out: dict[int, str] = {}
    try:
        ids = zk.get_children(BROKER_IDS)
    except NoNodeError:
        return out
    for bid in ids:
        if not bid.isdigit():
            continue
        try:
            endpoint = zkbrokers.decode(int(bid), zk.get(broker_path(int(bid)))[0]).endpoint_for_protocol(None)
        except (NoNodeError, ZnodeFormatError):
            continue
        if endpoint is not None:
            out[int(bid)] = f"{endpoint.host}:{endpoint.port}"
    return out


def _topic_partitions(zk: KazooClient, topic: str) -> list[int]:
    try:
        return sorted(decode_assignment(topic, zk.get(topic_path(topic))[0]).partitions)
    except (NoNodeError, ZnodeFormatError):
        return []


# -- partitions and streams ----------------------------------------------------------------------


@dataclass(eq=False)
class _PartitionInfo:
    topic: str
    partition: int
    thread: str
    stream: KafkaStream
    fetch_offset: int  # next offset to fetch; -1 until resolved by auto.offset.reset
    consumed_offset: int  # next offset the caller has not finished yet
    committed: int | None  # what ZooKeeper holds, None when there is no node
    active: bool = True
    tasks: list[Any] = field(default_factory=list)


class KafkaStream:
    """A blocking iterator of :class:`~headwater.client.ConsumerRecord` from one or more partitions.

    ``next()`` blocks until a record arrives; with ``consumer_timeout_ms`` >= 0 it raises
    :class:`ConsumerTimeoutError` instead after that long (and the stream can be iterated again).
    Iteration ends (StopIteration) when the connector shuts down. Use each stream from one thread.
    """

    def __init__(self, index: int, consumer_timeout_ms: int = -1, max_buffered: int = 2000) -> None:
        self.index = index
        self.consumer_timeout_ms = consumer_timeout_ms
        self.max_buffered = max_buffered
        self._cond = threading.Condition()
        self._buffer: deque[tuple[_PartitionInfo, ConsumerRecord]] = deque()
        self._in_hand: tuple[_PartitionInfo, int] | None = None
        self._closed = False

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        timeout = self.consumer_timeout_ms / 1000.0 if self.consumer_timeout_ms >= 0 else None
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._ack_in_hand()
            while True:
                while self._buffer:
                    info, record = self._buffer.popleft()
                    if info.active:
                        self._in_hand = (info, record.offset)
                        return record
                if self._closed:
                    raise StopIteration
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise ConsumerTimeoutError(f"no record within {self.consumer_timeout_ms} ms")
                self._cond.wait(remaining)

    # -- called by the connector -----------------------------------------------------------------

    def _ack_in_hand(self) -> None:  # under self._cond
        if self._in_hand is not None:
            info, offset = self._in_hand
            self._in_hand = None
            if info.active and offset + 1 > info.consumed_offset:
                info.consumed_offset = offset + 1
            self._cond.notify_all()

    def _ack(self) -> None:
        with self._cond:
            self._ack_in_hand()

    def _space(self) -> bool:
        return len(self._buffer) < self.max_buffered

    def _push(self, info: _PartitionInfo, records: list[ConsumerRecord]) -> bool:
        with self._cond:
            if not info.active or self._closed:
                return False
            self._buffer.extend((info, r) for r in records)
            self._cond.notify_all()
            return True

    def _drain(self, deadline: float) -> None:
        """Drop what is buffered and wait (until ``deadline``) for the record in hand to be finished."""
        with self._cond:
            self._buffer.clear()
            while self._in_hand is not None and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)

    def _close(self) -> None:
        with self._cond:
            self._closed = True
            self._buffer.clear()
            self._cond.notify_all()


# -- the connector -------------------------------------------------------------------------------


class ZookeeperConsumerConnector:
    """A member of a consumer group (the seeds' ``ConsumerConnector``); blocking API, thread-safe.

    ``zookeeper_connect`` is ``host:port[,host:port...][/chroot]``. Brokers are found under
    ``/brokers/ids``. Call :meth:`create_message_streams` or :meth:`create_message_streams_by_filter`
    once, iterate the streams, and :meth:`shutdown` at the end (or use ``with``).
    """

    def __init__(
        self,
        zookeeper_connect: str,
        group_id: str,
        consumer_id: str | None = None,
        *,
        auto_offset_reset: str = "largest",
        auto_commit_enable: bool = True,
        auto_commit_interval_ms: int = 60000,
        rebalance_backoff_ms: int = 2000,
        rebalance_max_retries: int = 4,
        rebalance_drain_ms: int = 2000,
        consumer_timeout_ms: int = -1,
        zookeeper_session_timeout_ms: int = 6000,
        zookeeper_connection_timeout_ms: int = 6000,
        fetch_max_bytes: int = 1048576,
        fetch_wait_max_ms: int = 100,
        queued_max_records: int = 2000,
        refresh_leader_backoff_ms: int = 200,
        client_id: str | None = None,
    ) -> None:
        if auto_offset_reset not in ("smallest", "largest", "earliest", "latest"):
            raise ValueError("auto_offset_reset must be 'smallest' or 'largest'")
        if not group_id or "/" in group_id:
            raise ValueError(f"invalid group id {group_id!r}")
        self.group_id = group_id
        self.consumer_id = consumer_id or (
            f"{group_id}_{socket.gethostname()}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"
        )
        self.reset_to = EARLIEST if auto_offset_reset in ("smallest", "earliest") else LATEST
        self.auto_commit_enable = auto_commit_enable
        self.auto_commit_interval = auto_commit_interval_ms / 1000.0
        self.rebalance_backoff = rebalance_backoff_ms / 1000.0
        self.rebalance_max_retries = max(1, rebalance_max_retries)
        self.rebalance_drain = rebalance_drain_ms / 1000.0
        self.consumer_timeout_ms = consumer_timeout_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.fetch_wait_max_ms = fetch_wait_max_ms
        self.queued_max_records = queued_max_records
        self.refresh_leader_backoff = refresh_leader_backoff_ms / 1000.0
        self.client_id = client_id or group_id

        self.dir_ids = consumer_ids_path(group_id)
        self.dir_owners = consumer_owners_path(group_id)
        self.dir_offsets = consumer_offsets_path(group_id)

        hosts, chroot = split_chroot(zookeeper_connect)
        self._zk = kazoo_client(hosts, session_timeout_s=zookeeper_session_timeout_ms / 1000.0)
        self._zk.start(zookeeper_connection_timeout_ms / 1000.0)
        if chroot:
            self._zk.ensure_path(chroot)
            self._zk.chroot = chroot
        self._zk.add_listener(self._on_zk_state)

        self._lock = threading.RLock()  # the registry, the subscription, closing
        self._rebalance_lock = threading.Lock()
        self._commit_lock = threading.Lock()  # a commit never races a partition being released
        self._rebalance_needed = threading.Event()
        self._stopping = threading.Event()
        self._session_lost = False
        self._registry: dict[tuple[str, int], _PartitionInfo] = {}
        self._static: dict[str, int] | None = None  # topic -> streams
        self._filter: TopicFilter | None = None
        self._filter_streams = 0
        self._streams_by_topic: dict[str, list[KafkaStream]] = {}
        self._filter_stream_list: list[KafkaStream] = []
        self._watches: list[Any] = []
        self._watched_topics: set[str] = set()
        self._loop: EventLoopThread | None = None
        self._consumer: Consumer | None = None
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.rebalance_count = 0  # successful rebalances (for tests and metrics)
        self.last_rebalance_error: BaseException | None = None

    def __enter__(self) -> ZookeeperConsumerConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- public API -----------------------------------------------------------------------------

    def create_message_streams(self, topic_count: Mapping[str, int]) -> dict[str, list[KafkaStream]]:
        """Subscribe to ``{topic: number of streams}``; returns ``{topic: [KafkaStream, ...]}``."""
        if not topic_count or any(n < 1 for n in topic_count.values()):
            raise ValueError("topic_count must map topics to at least one stream each")
        with self._lock:
            self._check_unsubscribed()
            self._static = dict(topic_count)
            self._streams_by_topic = {
                t: [self._new_stream(i) for i in range(n)] for t, n in sorted(self._static.items())
            }
            result = {t: list(s) for t, s in self._streams_by_topic.items()}
        self._start(pattern="static", subscription=self._static)
        return result

    def create_message_streams_by_filter(self, topic_filter: TopicFilter, num_streams: int = 1) -> list[KafkaStream]:
        """Subscribe to every topic the filter allows, now and later; each stream may mix topics."""
        if num_streams < 1:
            raise ValueError("num_streams must be at least 1")
        with self._lock:
            self._check_unsubscribed()
            self._filter = topic_filter
            self._filter_streams = num_streams
            self._filter_stream_list = [self._new_stream(i) for i in range(num_streams)]
            result = list(self._filter_stream_list)
        self._start(pattern=topic_filter.pattern_name, subscription={topic_filter.regex: num_streams})
        return result

    def commit_offsets(self) -> None:
        """Write the offset after every record the streams have returned so far to ZooKeeper."""
        self._commit(include_in_hand=True)

    def owned_partitions(self) -> dict[tuple[str, int], str]:
        """``{(topic, partition): thread id}`` this connector currently owns."""
        with self._lock:
            return {tp: info.thread for tp, info in self._registry.items() if info.active}

    def shutdown(self) -> None:
        """Commit, stop fetching, remove the registration and owner nodes, close ZooKeeper."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stopping.set()
        self._rebalance_needed.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(30)
        with self._rebalance_lock:
            self._stop_fetchers(drain=False)  # records in hand count as consumed: committed next
            with contextlib.suppress(Exception):
                self._commit(include_in_hand=True)
            with self._commit_lock:
                for info in self._registry.values():
                    info.active = False
            for w in self._watches:
                with contextlib.suppress(Exception):
                    w._stopped = True
            with contextlib.suppress(Exception):
                self._release_ownership()
            with contextlib.suppress(Exception):
                self._zk.delete(f"{self.dir_ids}/{self.consumer_id}")
            self._registry.clear()
        for stream in self._all_streams():
            stream._close()
        if self._loop is not None:
            consumer = self._consumer
            if consumer is not None:
                with contextlib.suppress(Exception):
                    self._loop.run(consumer.close(), timeout=10)
            self._loop.stop()
        with contextlib.suppress(Exception):
            self._zk.stop()
        with contextlib.suppress(Exception):
            self._zk.close()

    # -- setup ----------------------------------------------------------------------------------

    def _check_unsubscribed(self) -> None:
        if self._closed:
            raise RuntimeError("the connector is shut down")
        if self._static is not None or self._filter is not None:
            raise RuntimeError("create_message_streams may be called only once per connector")

    def _new_stream(self, index: int) -> KafkaStream:
        return KafkaStream(index, self.consumer_timeout_ms, self.queued_max_records)

    def _all_streams(self) -> list[KafkaStream]:
        return [s for ss in self._streams_by_topic.values() for s in ss] + self._filter_stream_list

    def _start(self, pattern: str, subscription: Mapping[str, int]) -> None:
        self._loop = EventLoopThread(name=f"headwater-zkconsumer-{self.consumer_id}")
        self._registration = ConsumerRegistration(dict(subscription), pattern, int(time.time() * 1000))
        self._register()
        self._watch_children(self.dir_ids, "consumers")
        self._watch_children(BROKER_IDS, "brokers")
        if self._filter is not None:
            self._watch_children(BROKER_TOPICS, "topics")
        else:
            assert self._static is not None
            for topic in self._static:
                self._watch_topic(topic)
        with self._rebalance_lock:
            self._synced_rebalance(raise_on_failure=True)
        self._threads = [
            threading.Thread(target=self._rebalance_main, name="headwater-zkconsumer-rebalance", daemon=True)
        ]
        if self.auto_commit_enable:
            self._threads.append(
                threading.Thread(target=self._autocommit_main, name="headwater-zkconsumer-commit", daemon=True)
            )
        for t in self._threads:
            t.start()

    def _register(self) -> None:
        path = f"{self.dir_ids}/{self.consumer_id}"
        data = self._registration.encode()
        try:
            self._zk.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            # ours from a session that is still expiring: wait for it to go, as Kafka does
            deadline = time.monotonic() + 30
            while True:
                try:
                    self._zk.create(path, data, ephemeral=True, makepath=True)
                    return
                except NodeExistsError:
                    stat = self._zk.exists(path)
                    if stat is not None and stat.ephemeralOwner == self._session_id():
                        self._zk.set(path, data)
                        return
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)

    def _session_id(self) -> int | None:
        client_id = self._zk.client_id
        return client_id[0] if client_id else None

    def _watch_children(self, path: str, what: str) -> None:
        self._zk.ensure_path(path)
        seen: list[set[str] | None] = [None]

        def changed(children: list[str]) -> bool | None:
            if self._stopping.is_set():
                return False
            now = set(children)
            if seen[0] is not None and now != seen[0]:
                log.info("%s: %s changed, rebalancing", self.consumer_id, what)
                self._rebalance_needed.set()
            seen[0] = now
            return None

        self._watches.append(ChildrenWatch(self._zk, path, changed))

    def _watch_topic(self, topic: str) -> None:
        if topic in self._watched_topics:
            return
        self._watched_topics.add(topic)
        seen: list[Any] = [False, None]

        def changed(data: bytes | None, _stat: Any, *_: Any) -> bool | None:
            if self._stopping.is_set():
                return False
            try:
                partitions = sorted(decode_assignment(topic, data).partitions)
            except ZnodeFormatError:
                partitions = []
            if seen[0] and partitions != seen[1]:
                log.info("%s: partitions of %s changed, rebalancing", self.consumer_id, topic)
                self._rebalance_needed.set()
            seen[0], seen[1] = True, partitions
            return None

        self._watches.append(DataWatch(self._zk, topic_path(topic), changed))

    def _on_zk_state(self, state: str) -> None:  # kazoo's thread: no blocking calls here
        if state == KazooState.LOST:
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost:
            self._rebalance_needed.set()

    # -- background threads ---------------------------------------------------------------------

    def _rebalance_main(self) -> None:
        while not self._stopping.is_set():
            self._rebalance_needed.wait()
            if self._stopping.is_set():
                return
            self._rebalance_needed.clear()
            with self._rebalance_lock:
                if self._stopping.is_set():
                    return
                try:
                    if self._session_lost:
                        self._session_lost = False
                        log.info("%s: new ZooKeeper session, registering again", self.consumer_id)
                        self._register()
                    self._synced_rebalance(raise_on_failure=False)
                except Exception as e:  # ZooKeeper unavailable: try again later
                    log.warning("%s: rebalance failed: %s", self.consumer_id, e)
                    self.last_rebalance_error = e
                    if not self._stopping.wait(self.rebalance_backoff):
                        self._rebalance_needed.set()

    def _autocommit_main(self) -> None:
        while not self._stopping.wait(self.auto_commit_interval):
            try:
                self._commit(include_in_hand=False)
            except Exception as e:
                log.warning("%s: auto commit failed: %s", self.consumer_id, e)

    # -- offsets ----------------------------------------------------------------------------------

    def _offset_path(self, topic: str, partition: int) -> str:
        return consumer_offset_path(self.group_id, topic, partition)

    def _read_offset(self, topic: str, partition: int) -> int | None:
        try:
            data, _ = self._zk.get(self._offset_path(topic, partition))
        except NoNodeError:
            return None
        try:
            return decode_offset(self._offset_path(topic, partition), data)
        except ZnodeFormatError:
            return None

    def _commit(self, *, include_in_hand: bool) -> None:
        if include_in_hand:
            for stream in self._all_streams():
                stream._ack()
        with self._commit_lock:
            self._commit_locked()

    def _commit_locked(self) -> None:
        with self._lock:
            infos = [i for i in self._registry.values() if i.active]
        for info in infos:
            offset = info.consumed_offset
            if offset < 0 or offset == info.committed:
                continue
            path = self._offset_path(info.topic, info.partition)
            data = encode_offset(offset)
            try:
                self._zk.set(path, data)
            except NoNodeError:
                try:
                    self._zk.create(path, data, makepath=True)
                except NodeExistsError:
                    self._zk.set(path, data)
            info.committed = offset

    # -- rebalance --------------------------------------------------------------------------------

    def _synced_rebalance(self, *, raise_on_failure: bool) -> None:
        """Rebalance with back-off and retry; under ``_rebalance_lock``."""
        for attempt in range(self.rebalance_max_retries):
            if self._stopping.is_set():
                return
            self._rebalance_needed.clear()
            try:
                if self._rebalance():
                    self.rebalance_count += 1
                    self.last_rebalance_error = None
                    return
            except Exception as e:
                log.warning("%s: rebalance attempt %d failed: %s", self.consumer_id, attempt + 1, e)
                self.last_rebalance_error = e
            self._stop_fetchers()
            self._release_ownership()
            if self._stopping.wait(self.rebalance_backoff):
                return
        error = ConsumerRebalanceFailedError(
            f"{self.consumer_id} could not rebalance after {self.rebalance_max_retries} attempts"
        )
        self.last_rebalance_error = error
        if raise_on_failure:
            raise error
        log.error("%s", error)
        self._rebalance_needed.set()  # keep trying in the background, after a back-off

    def _subscribed_threads(
        self, registration: ConsumerRegistration, consumer: str, topics: list[str]
    ) -> dict[str, int]:
        """``{topic: number of threads}`` of one member's registration, filters expanded."""
        subscription = registration.subscription
        pattern = registration.pattern
        if pattern == "static":
            return dict(subscription)
        out: dict[str, int] = {}
        for regex, n in subscription.items():
            topic_filter = _filter_for(pattern, str(regex))
            if topic_filter is None:
                continue
            for t in topics:
                if topic_filter.is_allowed(t):
                    out[t] = int(n)
        return out

    def _rebalance(self) -> bool:
        zk = self._zk
        brokers = broker_addresses(zk)
        topics = zk.get_children(BROKER_TOPICS) if zk.exists(BROKER_TOPICS) else []
        mine = self._subscribed_threads(self._registration, self.consumer_id, topics)
        if self._filter is None:
            for topic in mine:
                self._watch_topic(topic)
        # every member's threads, per topic
        threads_per_topic: dict[str, list[str]] = {t: [] for t in mine}
        for member in zk.get_children(self.dir_ids):
            path = f"{self.dir_ids}/{member}"
            try:
                registration = decode_registration(path, zk.get(path)[0])
            except (NoNodeError, ZnodeFormatError):
                continue
            for topic, n in self._subscribed_threads(registration, member, topics).items():
                if topic in threads_per_topic:
                    threads_per_topic[topic].extend(thread_ids(member, n))
        log.info("%s: rebalancing %s", self.consumer_id, sorted(mine))

        self._stop_fetchers()
        with self._commit_lock:
            self._commit_locked()
            with self._lock:
                for info in self._registry.values():
                    info.active = False
        self._release_ownership()

        if not brokers:
            log.info("%s: no brokers registered; waiting for one", self.consumer_id)
            return True

        wanted: dict[tuple[str, int], str] = {}
        my_threads = {t for topic, n in mine.items() for t in thread_ids(self.consumer_id, n)}
        for topic, threads in threads_per_topic.items():
            assignment = range_assign(_topic_partitions(zk, topic), threads)
            for thread, partitions in assignment.items():
                if thread in my_threads:
                    for p in partitions:
                        wanted[(topic, p)] = thread

        claimed: dict[tuple[str, int], str] = {}
        for (topic, p), thread in sorted(wanted.items()):
            if not self._claim(topic, p, thread):
                log.info("%s: %s-%d is still owned by another member; backing off", self.consumer_id, topic, p)
                for (t2, p2), _ in claimed.items():
                    self._delete_owner(t2, p2)
                return False
            claimed[(topic, p)] = thread

        registry: dict[tuple[str, int], _PartitionInfo] = {}
        for (topic, p), thread in claimed.items():
            offset = self._read_offset(topic, p)
            stream = self._stream_for(topic, ConsumerThreadId(thread).thread)
            registry[(topic, p)] = _PartitionInfo(
                topic, p, thread, stream, fetch_offset=-1 if offset is None else offset,
                consumed_offset=-1 if offset is None else offset, committed=offset,
            )  # fmt: skip
        with self._lock:
            self._registry = registry
        self._start_fetchers(list(registry.values()))
        log.info("%s: owns %s", self.consumer_id, sorted(registry))
        return True

    def _stream_for(self, topic: str, n: int) -> KafkaStream:
        if self._filter is not None:
            return self._filter_stream_list[n]
        return self._streams_by_topic[topic][n]

    def _claim(self, topic: str, partition: int, thread: str) -> bool:
        path = consumer_owner_path(self.group_id, topic, partition)
        try:
            self._zk.create(path, encode_owner(thread), ephemeral=True, makepath=True)
            return True
        except NodeExistsError:
            try:
                data, stat = self._zk.get(path)
            except NoNodeError:
                return False  # released just now: the retry will get it
            return bool(decode_owner(data) == thread and stat.ephemeralOwner == self._session_id())

    def _delete_owner(self, topic: str, partition: int) -> None:
        path = consumer_owner_path(self.group_id, topic, partition)
        try:
            _, stat = self._zk.get(path)
            if stat.ephemeralOwner == self._session_id():
                self._zk.delete(path, version=stat.version)
        except NoNodeError:
            pass

    def _release_ownership(self) -> None:
        """Delete every owner node of this session (what the registry says, and any stragglers)."""
        with self._lock:
            owned = set(self._registry)
        try:
            topics = self._zk.get_children(self.dir_owners)
        except NoNodeError:
            topics = []
        for topic in topics:
            try:
                for p in self._zk.get_children(consumer_owners_path(self.group_id, topic)):
                    if p.isdigit():
                        owned.add((topic, int(p)))
            except NoNodeError:
                continue
        for topic, p in owned:
            self._delete_owner(topic, p)

    # -- fetchers ---------------------------------------------------------------------------------

    def _start_fetchers(self, infos: list[_PartitionInfo]) -> None:
        if not infos:
            return
        assert self._loop is not None
        bootstrap = sorted(broker_addresses(self._zk).values())
        loop = self._loop

        async def start() -> None:
            if self._consumer is None:
                self._consumer = Consumer(
                    bootstrap,
                    client_id=self.client_id,
                    retry_backoff_ms=int(self.refresh_leader_backoff * 1000),
                )
            for info in infos:
                info.tasks.append(loop.loop.create_task(self._fetch_loop(info)))

        loop.run(start(), timeout=30)

    def _stop_fetchers(self, *, drain: bool = True) -> None:
        with self._lock:
            infos = list(self._registry.values())
        tasks = [t for i in infos for t in i.tasks]
        if tasks and self._loop is not None:

            async def stop() -> None:
                import asyncio

                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            with contextlib.suppress(Exception):
                self._loop.run(stop(), timeout=30)
        for info in infos:
            info.tasks.clear()
        deadline = time.monotonic() + (self.rebalance_drain if drain else 0.0)
        for stream in {id(i.stream): i.stream for i in infos}.values():
            stream._drain(deadline)

    async def _fetch_loop(self, info: _PartitionInfo) -> None:
        import asyncio

        consumer = self._consumer
        assert consumer is not None
        while info.active:
            try:
                if info.fetch_offset < 0:
                    await self._reset_offset(consumer, info)
                if not info.stream._space():
                    await asyncio.sleep(0.02)
                    continue
                records, _ = await consumer.fetch(
                    info.topic,
                    info.partition,
                    info.fetch_offset,
                    max_bytes=self.fetch_max_bytes,
                    max_wait_ms=self.fetch_wait_max_ms,
                )
                records = [r for r in records if r.offset >= info.fetch_offset]
                if records and info.stream._push(info, records):
                    info.fetch_offset = records[-1].offset + 1
            except asyncio.CancelledError:
                raise
            except OffsetOutOfRangeError:
                log.warning(
                    "%s: offset %d out of range for %s-%d; resetting",
                    self.consumer_id, info.fetch_offset, info.topic, info.partition,
                )  # fmt: skip
                await self._reset_offset(consumer, info)
            except Exception as e:
                log.warning("%s: fetching %s-%d: %s", self.consumer_id, info.topic, info.partition, e)
                await asyncio.sleep(self.refresh_leader_backoff)

    async def _reset_offset(self, consumer: Consumer, info: _PartitionInfo) -> None:
        offset = await consumer.offsets_before(info.topic, info.partition, self.reset_to, 1)
        new = offset[0] if offset else 0
        with info.stream._cond:
            if not info.active:
                return
            info.fetch_offset = new
            info.consumed_offset = new  # committed at the next commit, so others start here too
        log.info("%s: %s-%d starts at %d", self.consumer_id, info.topic, info.partition, new)


def consume(
    streams: list[KafkaStream], handler: Callable[[ConsumerRecord], None], stop: threading.Event
) -> list[threading.Thread]:
    """Iterate each stream on its own daemon thread, calling ``handler`` per record, until ``stop``."""

    def run(stream: KafkaStream) -> None:
        while not stop.is_set():
            try:
                for record in stream:
                    handler(record)
                    if stop.is_set():
                        return
                return
            except ConsumerTimeoutError:
                continue

    threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in streams]
    for t in threads:
        t.start()
    return threads
