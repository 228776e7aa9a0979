"""What the client knows about the cluster: brokers, topics, partition leaders, and one
connection per broker.

Metadata comes from any reachable broker (the bootstrap list first, then known brokers) with the
highest common Metadata version. Topics are fetched on demand and remembered ("topics of
interest"), so a later refresh covers them. Callers that hit NOT_LEADER_FOR_PARTITION,
UNKNOWN_TOPIC_OR_PARTITION or LEADER_NOT_AVAILABLE call :meth:`Cluster.refresh` and retry after
:attr:`Cluster.retry_backoff`; :meth:`Cluster.leader_for` does that loop itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from headwater.client.connection import DEFAULT_CLIENT_ID, BrokerConnection, parse_address
from headwater.client.discovery import brokers_from_zookeeper, is_zookeeper_bootstrap
from headwater.client.errors import KafkaAuthenticationError, KafkaConnectionError, KafkaTimeoutError, UnknownTopicError
from headwater.client.security import ClientSecurity
from headwater.protocol.apis import METADATA
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Api, Message

log = logging.getLogger("headwater.client")

#: Errors that mean "the metadata you used is stale": refresh, back off, retry.
STALE_METADATA_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_FOR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    topic: str
    partition: int
    leader: int  # -1 when there is none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    leader_epoch: int = -1
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)
    is_internal: bool = False
    error: ErrorCode = ErrorCode.NONE


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"h1:p1,h2:p2"`` or a list of ``host:port`` strings, as (host, port) pairs."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out = [parse_address(item) for item in items if item.strip()]
    if not out:
        raise ValueError("the bootstrap server list is empty")
    return out


class Cluster:
    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        client_id: str | None = DEFAULT_CLIENT_ID,
        connect_timeout: float = 10.0,
        request_timeout: float = 30.0,
        retry_backoff: float = 0.1,
        metadata_timeout: float = 60.0,
        unknown_topic_timeout: float = 5.0,
        allow_auto_create_topics: bool = True,
        security: ClientSecurity | Mapping[str, str] | None = None,
    ) -> None:
        """``security``: a :class:`ClientSecurity`, or Kafka client properties (``security.protocol``,
        ``ssl.ca.location``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password``, ...)."""
        self.security = (
            security
            if isinstance(security, ClientSecurity) or security is None
            else ClientSecurity.from_properties(security)
        )
        #: a ``zk://`` bootstrap: brokers are looked up in ZooKeeper (see headwater.client.discovery)
        self.zookeeper_bootstrap = (
            bootstrap if isinstance(bootstrap, str) and is_zookeeper_bootstrap(bootstrap) else None
        )
        self.bootstrap = [] if self.zookeeper_bootstrap else parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.retry_backoff = retry_backoff
        self.metadata_timeout = metadata_timeout
        self.unknown_topic_timeout = unknown_topic_timeout
        self.allow_auto_create_topics = allow_auto_create_topics
        self.brokers: dict[int, BrokerMetadata] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.topic_errors: dict[str, ErrorCode] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None
        self.last_refresh = 0.0  # time.monotonic() of the last successful refresh
        self._interest: set[str] = set()
        self._conns: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Future[BrokerConnection]] = {}
        self._bootstrap_conn: BrokerConnection | None = None
        self._refresh_lock = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- connections -----------------------------------------------------------------------------

    def _new_connection(self, host: str, port: int, node_id: int | None) -> BrokerConnection:
        return BrokerConnection(
            host,
            port,
            node_id=node_id,
            client_id=self.client_id,
            connect_timeout=self.connect_timeout,
            request_timeout=self.request_timeout,
            security=self.security,
        )

    async def connection(self, node_id: int) -> BrokerConnection:
        """The (connected) connection to broker ``node_id``; opened on first use and after a failure."""
        conn = self._conns.get(node_id)
        if conn is not None and conn.connected:
            return conn
        pending = self._connecting.get(node_id)
        if pending is not None:
            return await asyncio.shield(pending)
        broker = self.brokers.get(node_id)
        if broker is None:
            raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata")
        fut: asyncio.Future[BrokerConnection] = asyncio.get_running_loop().create_future()
        self._connecting[node_id] = fut
        try:
            conn = self._new_connection(broker.host, broker.port, node_id)
            await conn.connect()
            self._conns[node_id] = conn
            fut.set_result(conn)
            return conn
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: no "never retrieved" warning when nobody else waits
            raise
        finally:
            del self._connecting[node_id]

    async def any_connection(self) -> BrokerConnection:
        """A connection to some broker: an open one if there is one, else the bootstrap list in order."""
        if self._closed:
            raise KafkaConnectionError("the client is closed")
        for conn in self._conns.values():
            if conn.connected:
                return conn
        if self._bootstrap_conn is not None and self._bootstrap_conn.connected:
            return self._bootstrap_conn
        errors: list[str] = []
        if self.zookeeper_bootstrap is not None:
            try:
                # a secured client picks each broker's listener of its protocol; a plain one the first
                protocol = self.security.protocol if self.security and self.security.protocol != "PLAINTEXT" else None
                self.bootstrap = await brokers_from_zookeeper(self.zookeeper_bootstrap, self.connect_timeout, protocol)
            except Exception as e:
                errors.append(f"ZooKeeper {self.zookeeper_bootstrap}: {e!r}")
            if not self.bootstrap and not self.brokers:
                errors.append(f"no brokers registered in ZooKeeper {self.zookeeper_bootstrap}")
        candidates = list(self.bootstrap) + [
            (b.host, b.port) for b in self.brokers.values() if (b.host, b.port) not in self.bootstrap
        ]
        refused = 0  # logins the brokers refused: credentials, not reachability, are wrong
        for host, port in candidates:
            conn = self._new_connection(host, port, None)
            try:
                await conn.connect()
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                errors.append(str(e))
                refused += isinstance(e, KafkaAuthenticationError)
                continue
            self._bootstrap_conn = conn
            return conn
        error = KafkaAuthenticationError if refused and refused == len(errors) else KafkaConnectionError
        if len(errors) == 1:
            raise error(errors[0])
        raise error("could not reach any bootstrap broker: " + "; ".join(errors))

    async def request(
        self,
        node_id: int | None,
        api: Api,
        body: Message,
        version: int | None = None,
        *,
        expect_response: bool = True,
        timeout: float | None = None,
    ) -> Message:
        """One request to broker ``node_id`` (None: any broker)."""
        conn = await (self.any_connection() if node_id is None else self.connection(node_id))
        return await conn.request(api, body, version, expect_response=expect_response, timeout=timeout)

    async def close(self) -> None:
        self._closed = True
        conns = list(self._conns.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._conns.clear()
        self._bootstrap_conn = None
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    # -- metadata --------------------------------------------------------------------------------

    async def refresh(self, topics: Iterable[str] | None = None, *, all_topics: bool = False) -> None:
        """Fetch metadata for ``topics`` (added to the topics of interest), or for the topics of
        interest when None, or for every topic with ``all_topics``."""
        named = None if topics is None else set(topics)
        if named is not None:
            self._interest.update(named)
        wanted = None if all_topics else sorted(self._interest if named is None else named)
        async with self._refresh_lock:
            last_error: Exception | None = None
            for _attempt in range(2):
                conn = await self.any_connection()
                try:
                    version = conn.version_for(METADATA)
                    body: Message = {
                        "topics": _topics_field(wanted, version),
                        "allow_auto_topic_creation": self.allow_auto_create_topics,
                    }
                    response = await conn.request(METADATA, body, version)
                except KafkaConnectionError as e:  # that broker went away: try another
                    last_error = e
                    await conn.close()
                    continue
                self._apply(response, wanted)
                return
            assert last_error is not None
            raise last_error

    def _apply(self, response: Message, wanted: list[str] | None) -> None:
        brokers = {
            int(b["node_id"]): BrokerMetadata(int(b["node_id"]), b["host"], int(b["port"]), b.get("rack"))
            for b in response["brokers"]
        }
        self.brokers = brokers
        for node_id, conn in list(self._conns.items()):
            b = brokers.get(node_id)
            if b is None or (b.host, b.port) != (conn.host, conn.port):
                del self._conns[node_id]
                task = asyncio.get_running_loop().create_task(conn.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        self.controller_id = int(response.get("controller_id", -1))
        self.cluster_id = response.get("cluster_id")
        if wanted is None:
            self.topics = {}
        seen: set[str] = set()
        for t in response["topics"]:
            name = t["name"]
            seen.add(name)
            code = ErrorCode.of(t["error_code"])
            partitions = {
                int(p["partition_index"]): PartitionMetadata(
                    topic=name,
                    partition=int(p["partition_index"]),
                    leader=int(p["leader_id"]),
                    replicas=tuple(p["replica_nodes"]),
                    isr=tuple(p["isr_nodes"]),
                    offline_replicas=tuple(p.get("offline_replicas") or ()),
                    leader_epoch=int(p.get("leader_epoch", -1)),
                    error=ErrorCode.of(p["error_code"]),
                )
                for p in t["partitions"]
            }
            if code is ErrorCode.NONE or (partitions and code is ErrorCode.LEADER_NOT_AVAILABLE):
                self.topics[name] = TopicMetadata(name, partitions, bool(t.get("is_internal")), code)
                self.topic_errors.pop(name, None)
            else:
                self.topics.pop(name, None)
                self.topic_errors[name] = code
        if wanted is not None:
            for name in wanted:
                if name not in seen:  # not answered at all: as good as unknown
                    self.topics.pop(name, None)
                    self.topic_errors[name] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        self.last_refresh = time.monotonic()

    async def topic_metadata(self, topic: str, *, timeout: float | None = None) -> TopicMetadata:
        """The metadata of ``topic``, fetched if not known yet.

        Raises UnknownTopicError when the cluster keeps answering UNKNOWN_TOPIC_OR_PARTITION for
        ``unknown_topic_timeout`` seconds, KafkaError for other topic errors that do not clear
        within ``timeout`` (default ``metadata_timeout``).
        """
        self._interest.add(topic)
        tm = self.topics.get(topic)
        if tm is not None and tm.partitions:
            return tm
        start = time.monotonic()
        deadline = start + (self.metadata_timeout if timeout is None else timeout)
        unknown_deadline = min(deadline, start + self.unknown_topic_timeout)
        backoff = self.retry_backoff
        while True:
            await self.refresh([topic])
            tm = self.topics.get(topic)
            if tm is not None and tm.partitions:
                return tm
            code = self.topic_errors.get(topic, ErrorCode.LEADER_NOT_AVAILABLE)
            now = time.monotonic()
            if code is ErrorCode.INVALID_TOPIC_EXCEPTION:
                raise KafkaError(code, f"invalid topic name {topic!r}")
            if not code.retriable and code is not ErrorCode.NONE:
                raise KafkaError(code, f"metadata for topic {topic!r}: {code.name}")
            if code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and now + backoff >= unknown_deadline:
                raise UnknownTopicError(topic)
            if now + backoff >= deadline:
                raise KafkaTimeoutError(
                    f"topic {topic!r} not available in metadata after {now - start:.1f}s ({code.name})"
                )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def partitions_for(self, topic: str) -> list[int]:
        tm = await self.topic_metadata(topic)
        return sorted(tm.partitions)

    def leader(self, topic: str, partition: int) -> int:
        """The cached leader of (topic, partition), or -1 (unknown, none, or its broker is not known)."""
        tm = self.topics.get(topic)
        if tm is None:
            return -1
        pm = tm.partitions.get(partition)
        if pm is None or pm.leader < 0 or pm.leader not in self.brokers:
            return -1
        return pm.leader

    async def leader_for(self, topic: str, partition: int, *, timeout: float | None = None) -> int:
        """The leader's broker id, refreshing metadata (with backoff) until there is one."""
        start = time.monotonic()
        deadline = start + (self.metadata_timeout if timeout is None else timeout)
        backoff = self.retry_backoff
        refreshed = False
        while True:
            tm = await self.topic_metadata(topic, timeout=max(deadline - time.monotonic(), 0.0))
            if partition not in tm.partitions and refreshed:
                raise UnknownTopicError(topic, partition)
            leader = self.leader(topic, partition)
            if leader >= 0:
                return leader
            if refreshed and time.monotonic() + backoff >= deadline:
                raise KafkaError(
                    ErrorCode.LEADER_NOT_AVAILABLE,
                    f"partition {topic}-{partition} has no leader after {time.monotonic() - start:.1f}s",
                )
            if refreshed:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
            await self.refresh([topic])
            refreshed = True


def _topics_field(wanted: list[str] | None, version: int) -> list[Message] | None:
    if wanted is None:
        return [] if version == 0 else None  # v0: empty means all; v1+: null means all
    return [{"name": t} for t in wanted]
