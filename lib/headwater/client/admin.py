"""Topic administration: create, delete, grow (CreatePartitions), list, describe, read and change
topic configs (DescribeConfigs, IncrementalAlterConfigs).

CreateTopics and DeleteTopics go to the controller (the Metadata response names it); a
NOT_CONTROLLER answer refreshes the metadata and retries. Descriptions come from Metadata,
configs from DescribeConfigs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from headwater.client.cluster import Cluster, PartitionMetadata
from headwater.client.errors import KafkaConnectionError, KafkaTimeoutError, UnknownTopicError
from headwater.client.security import ClientSecurity
from headwater.protocol.apis import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    DESCRIBE_LOG_DIRS,
    ELECT_LEADERS,
    INCREMENTAL_ALTER_CONFIGS,
)
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Api, Message
from headwater.zk.topics import MAX_TOPIC_NAME_LENGTH, topic_name_error

__all__ = ["Admin", "ConfigEntry", "LogDirInfo", "NewTopic", "ReplicaInfo", "TopicDescription", "validate_topic_name"]

MAX_TOPIC_NAME = MAX_TOPIC_NAME_LENGTH

#: DescribeConfigs config_source values (v1+).
CONFIG_SOURCES = {
    -1: "UNKNOWN",
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}
_RESOURCE_TOPIC = 2
_RESOURCE_BROKER = 4


def validate_topic_name(name: str) -> None:
    """Kafka's rule (``Topic.validate``); raises KafkaError(INVALID_TOPIC_EXCEPTION) with the reason."""
    reason = topic_name_error(name)
    if reason is None:
        return
    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"invalid topic name {name!r}: {reason}")


@dataclass(frozen=True)
class NewTopic:
    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    configs: Mapping[str, str] = field(default_factory=dict)
    #: partition -> broker ids; when given, num_partitions and replication_factor are ignored.
    assignments: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: list[PartitionMetadata]
    is_internal: bool = False

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str  # one of CONFIG_SOURCES' names
    is_default: bool
    read_only: bool
    is_sensitive: bool
    #: (name, value, source) of each layer that sets it, strongest first (when asked for)
    synonyms: tuple[tuple[str, str | None, str], ...] = ()


@dataclass(frozen=True)
class ReplicaInfo:
    """One replica in a log dir (DescribeLogDirs)."""

    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True)
class LogDirInfo:
    """One log dir of a broker (DescribeLogDirs): its error and the replicas it holds."""

    path: str
    error: KafkaError | None
    replicas: dict[tuple[str, int], ReplicaInfo]


class Admin:
    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        client_id: str = "headwater-admin",
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
        retry_backoff_ms: int = 100,
        retries: int = 5,
        cluster: Cluster | None = None,
        security: ClientSecurity | Mapping[str, str] | None = None,
    ) -> None:
        self.retries = retries
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.request_timeout = request_timeout_ms / 1000.0
        self._owns_cluster = cluster is None
        self.cluster = cluster or Cluster(
            bootstrap,
            security=security,
            client_id=client_id,
            connect_timeout=connect_timeout_ms / 1000.0,
            request_timeout=self.request_timeout,
            retry_backoff=self.retry_backoff,
            allow_auto_create_topics=False,
        )

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_cluster:
            await self.cluster.close()

    async def _to_controller(self, api: Api, body: Message, timeout: float) -> Message:
        """Send to the controller; returns the response (callers look for NOT_CONTROLLER in it)."""
        deadline = time.monotonic() + min(self.request_timeout, 10.0)
        backoff = self.retry_backoff
        while self.cluster.controller_id < 0 or self.cluster.controller_id not in self.cluster.brokers:
            await self.cluster.refresh()
            if self.cluster.controller_id >= 0 and self.cluster.controller_id in self.cluster.brokers:
                break
            if time.monotonic() + backoff >= deadline:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "the cluster has no controller right now")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
        return await self.cluster.request(self.cluster.controller_id, api, body, timeout=timeout)

    # -- create / delete -------------------------------------------------------------------------

    async def create_topics(
        self, topics: Iterable[NewTopic], *, timeout_ms: int = 30000, validate_only: bool = False
    ) -> dict[str, KafkaError | None]:
        """Create topics; per topic name, None on success or the KafkaError the controller answered."""
        wanted = list(topics)
        for t in wanted:
            validate_topic_name(t.name)
        body: Message = {
            "topics": [_create_entry(t) for t in wanted],
            "timeout_ms": timeout_ms,
            "validate_only": validate_only,
        }

        def entries(response: Message) -> list[tuple[str, int, str | None]]:
            return [(t["name"], t["error_code"], t.get("error_message")) for t in response["topics"]]

        return await self._admin_call(CREATE_TOPICS, body, entries, [t.name for t in wanted], timeout_ms)

    async def create_topic(
        self,
        name: str,
        num_partitions: int = 1,
        replication_factor: int = 1,
        configs: Mapping[str, str] | None = None,
        *,
        timeout_ms: int = 30000,
    ) -> None:
        """Create one topic; raises its KafkaError (TOPIC_ALREADY_EXISTS, INVALID_REPLICATION_FACTOR, ...)."""
        result = await self.create_topics(
            [NewTopic(name, num_partitions, replication_factor, dict(configs or {}))], timeout_ms=timeout_ms
        )
        error = result.get(name)
        if error is not None:
            raise error

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int = 30000) -> dict[str, KafkaError | None]:
        wanted = list(names)
        body: Message = {"topic_names": wanted, "timeout_ms": timeout_ms}

        def entries(response: Message) -> list[tuple[str, int, str | None]]:
            return [(t["name"], t["error_code"], None) for t in response["responses"]]

        return await self._admin_call(DELETE_TOPICS, body, entries, wanted, timeout_ms)

    async def delete_topic(self, name: str, *, timeout_ms: int = 30000) -> None:
        error = (await self.delete_topics([name], timeout_ms=timeout_ms)).get(name)
        if error is not None:
            if error.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopicError(name)
            raise error

    async def create_partitions(
        self,
        new_counts: Mapping[str, int],
        *,
        assignments: Mapping[str, list[list[int]]] | None = None,
        timeout_ms: int = 30000,
        validate_only: bool = False,
    ) -> dict[str, KafkaError | None]:
        """Grow topics to the given total partition counts (CreatePartitions); per topic, None or its
        KafkaError (INVALID_PARTITIONS when the count is not above the current one, ...).
        ``assignments`` optionally gives one replica list per new partition."""
        body: Message = {
            "topics": [
                {"name": name, "count": count, "assignments": _partition_assignments(assignments, name)}
                for name, count in new_counts.items()
            ],
            "timeout_ms": timeout_ms,
            "validate_only": validate_only,
        }

        def entries(response: Message) -> list[tuple[str, int, str | None]]:
            return [(t["name"], t["error_code"], t.get("error_message")) for t in response["results"]]

        return await self._admin_call(CREATE_PARTITIONS, body, entries, list(new_counts), timeout_ms)

    async def _admin_call(
        self,
        api: Api,
        body: Message,
        entries: Callable[[Message], list[tuple[str, int, str | None]]],
        names: list[str],
        timeout_ms: int,
    ) -> dict[str, KafkaError | None]:
        backoff = self.retry_backoff
        result: dict[str, KafkaError | None] = {}
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                await self.cluster.refresh()
            try:
                response = await self._to_controller(api, body, timeout_ms / 1000.0 + self.request_timeout)
            except (KafkaConnectionError, KafkaTimeoutError):
                if attempt == self.retries:
                    raise
                await self.cluster.refresh()
                continue
            result = {}
            not_controller = False
            for name, code_num, message in entries(response):
                code = ErrorCode.of(code_num)
                if code is ErrorCode.NOT_CONTROLLER:
                    not_controller = True
                result[name] = None if code is ErrorCode.NONE else KafkaError(code, message or _describe(code, name))
            if not not_controller:
                break
        for name in names:
            result.setdefault(name, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for topic {name!r}"))
        return result

    # -- describe --------------------------------------------------------------------------------

    async def list_topics(self, *, include_internal: bool = True) -> list[str]:
        await self.cluster.refresh(all_topics=True)
        return sorted(n for n, t in self.cluster.topics.items() if include_internal or not t.is_internal)

    async def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        """Leader, replicas and ISR of every partition of ``names`` (all topics when None).
        Raises UnknownTopicError for a named topic that does not exist."""
        if names is None:
            await self.cluster.refresh(all_topics=True)
            wanted = sorted(self.cluster.topics)
        else:
            wanted = list(names)
            await self.cluster.refresh(wanted)
        out: list[TopicDescription] = []
        for name in wanted:
            tm = self.cluster.topics.get(name)
            if tm is None:
                code = self.cluster.topic_errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                if code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise UnknownTopicError(name)
                raise KafkaError(code, f"describing topic {name!r}: {code.name}")
            out.append(TopicDescription(name, [tm.partitions[p] for p in sorted(tm.partitions)], tm.is_internal))
        return out

    async def describe_configs(self, topic: str, keys: Iterable[str] | None = None) -> dict[str, ConfigEntry]:
        """The topic's configuration (every key, or ``keys``), from any broker."""
        body: Message = {
            "resources": [
                {
                    "resource_type": _RESOURCE_TOPIC,
                    "resource_name": topic,
                    "configuration_keys": None if keys is None else list(keys),
                }
            ],
            "include_synonyms": False,
        }
        response = await self.cluster.request(None, DESCRIBE_CONFIGS, body)
        out: dict[str, ConfigEntry] = {}
        for r in response["results"]:
            code = ErrorCode.of(r["error_code"])
            if code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopicError(topic)
            if code is not ErrorCode.NONE:
                raise KafkaError(code, r.get("error_message") or f"describing configs of {topic!r}: {code.name}")
            for c in r["configs"]:
                source_id = int(c.get("config_source", -1))
                if source_id == -1:  # v0: only is_default
                    source_id = 5 if c.get("is_default") else 1
                out[c["name"]] = ConfigEntry(
                    name=c["name"],
                    value=c.get("value"),
                    source=CONFIG_SOURCES.get(source_id, "UNKNOWN"),
                    is_default=source_id == 5,
                    read_only=bool(c.get("read_only")),
                    is_sensitive=bool(c.get("is_sensitive")),
                )
        return out

    async def alter_topic_configs(
        self,
        topic: str,
        set_configs: Mapping[str, str] | None = None,
        delete_configs: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        """Set and delete (back to the default) some of a topic's config overrides, leaving the
        others (IncrementalAlterConfigs). Raises the KafkaError the broker answered:
        INVALID_CONFIG for an unknown key or a bad value (then nothing is stored)."""
        configs = [{"name": k, "config_operation": 0, "value": v} for k, v in (set_configs or {}).items()]
        configs += [{"name": k, "config_operation": 1, "value": None} for k in delete_configs]
        body: Message = {
            "resources": [{"resource_type": _RESOURCE_TOPIC, "resource_name": topic, "configs": configs}],
            "validate_only": validate_only,
        }
        response = await self.cluster.request(None, INCREMENTAL_ALTER_CONFIGS, body)
        for r in response["responses"]:
            code = ErrorCode.of(r["error_code"])
            if code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopicError(topic)
            if code is not ErrorCode.NONE:
                raise KafkaError(code, r.get("error_message") or f"altering configs of {topic!r}: {code.name}")

    async def _know_broker(self, broker_id: int | None) -> None:
        """Metadata that lists ``broker_id`` (a request goes to that broker), or KafkaError."""
        if broker_id is not None and broker_id not in self.cluster.brokers:
            await self.cluster.refresh()
            if broker_id not in self.cluster.brokers:
                raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not alive in the cluster")

    async def describe_broker_configs(self, broker_id: int | None) -> dict[str, ConfigEntry]:
        """A broker's configs with their sources (``broker_id`` None: the cluster-wide dynamic
        defaults), asked of that broker (any broker for the defaults)."""
        body: Message = {
            "resources": [
                {
                    "resource_type": _RESOURCE_BROKER,
                    "resource_name": "" if broker_id is None else str(broker_id),
                    "configuration_keys": None,
                }
            ],
            "include_synonyms": True,
        }
        await self._know_broker(broker_id)
        response = await self.cluster.request(broker_id, DESCRIBE_CONFIGS, body, version=1)
        out: dict[str, ConfigEntry] = {}
        for r in response["results"]:
            code = ErrorCode.of(r["error_code"])
            if code is not ErrorCode.NONE:
                raise KafkaError(code, r.get("error_message") or f"describing broker configs: {code.name}")
            for c in r["configs"]:
                source_id = int(c.get("config_source", -1))
                out[c["name"]] = ConfigEntry(
                    name=c["name"],
                    value=c.get("value"),
                    source=CONFIG_SOURCES.get(source_id, "UNKNOWN"),
                    is_default=source_id == 5,
                    read_only=bool(c.get("read_only")),
                    is_sensitive=bool(c.get("is_sensitive")),
                    synonyms=tuple(
                        (s["name"], s.get("value"), CONFIG_SOURCES.get(int(s["source"]), "UNKNOWN"))
                        for s in c.get("synonyms") or []
                    ),
                )
        return out

    async def alter_broker_configs(
        self,
        broker_id: int | None,
        set_configs: Mapping[str, str] | None = None,
        delete_configs: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        """Set and delete dynamic broker configs of one broker (``broker_id`` None: the cluster-wide
        default), IncrementalAlterConfigs sent to that broker. Raises the KafkaError answered
        (INVALID_CONFIG: not a dynamic broker config or a bad value; nothing stored)."""
        configs = [{"name": k, "config_operation": 0, "value": v} for k, v in (set_configs or {}).items()]
        configs += [{"name": k, "config_operation": 1, "value": None} for k in delete_configs]
        name = "" if broker_id is None else str(broker_id)
        body: Message = {
            "resources": [{"resource_type": _RESOURCE_BROKER, "resource_name": name, "configs": configs}],
            "validate_only": validate_only,
        }
        await self._know_broker(broker_id)
        response = await self.cluster.request(broker_id, INCREMENTAL_ALTER_CONFIGS, body)
        for r in response["responses"]:
            code = ErrorCode.of(r["error_code"])
            if code is not ErrorCode.NONE:
                raise KafkaError(code, r.get("error_message") or f"altering broker configs: {code.name}")

    async def delete_records(
        self, offsets: Mapping[tuple[str, int], int], *, timeout_ms: int = 30000
    ) -> dict[tuple[str, int], int | KafkaError]:
        """Move each partition's log start offset to the given offset (-1: its high watermark),
        as kafka-delete-records does; per partition, the low watermark answered (every in-sync
        replica's log start offset reached it) or the KafkaError. One request per leader."""
        by_leader: dict[int, dict[str, list[Message]]] = {}
        out: dict[tuple[str, int], int | KafkaError] = {}
        for (topic, partition), offset in offsets.items():
            try:
                leader = await self.cluster.leader_for(topic, partition)
            except KafkaError as e:
                out[(topic, partition)] = e
                continue
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(
                {"partition_index": partition, "offset": offset}
            )

        async def send(leader: int, topics: dict[str, list[Message]]) -> None:
            body: Message = {
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                "timeout_ms": timeout_ms,
            }
            response = await self.cluster.request(leader, DELETE_RECORDS, body, timeout=timeout_ms / 1000.0 + 30.0)
            for t in response["topics"]:
                for p in t["partitions"]:
                    code = ErrorCode.of(p["error_code"])
                    key = (t["name"], p["partition_index"])
                    out[key] = (
                        p["low_watermark"] if code is ErrorCode.NONE else KafkaError(code, _describe(code, key[0]))
                    )

        await asyncio.gather(*(send(leader, topics) for leader, topics in by_leader.items()))
        for key in offsets:
            out.setdefault(key, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {key[0]}-{key[1]}"))
        return out

    async def describe_log_dirs(
        self, broker_ids: Iterable[int] | None = None, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[int, list[LogDirInfo] | KafkaError]:
        """Each broker's log dirs and the replicas in them, as kafka-log-dirs asks them (one
        DescribeLogDirs per broker; ``broker_ids`` None: every live broker, ``partitions`` None:
        every replica). A broker that cannot be asked maps to its KafkaError."""
        await self.cluster.refresh()
        ids = sorted(self.cluster.brokers) if broker_ids is None else list(broker_ids)
        topics: list[Message] | None = None
        if partitions is not None:
            grouped: dict[str, list[int]] = {}
            for t, p in partitions:
                grouped.setdefault(t, []).append(p)
            topics = [{"topic": t, "partitions": ps} for t, ps in grouped.items()]
        out: dict[int, list[LogDirInfo] | KafkaError] = {}

        async def ask(broker_id: int) -> None:
            if broker_id not in self.cluster.brokers:
                out[broker_id] = KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not alive")
                return
            try:
                response = await self.cluster.request(broker_id, DESCRIBE_LOG_DIRS, {"topics": topics})
            except (KafkaError, KafkaConnectionError, KafkaTimeoutError) as e:
                out[broker_id] = e if isinstance(e, KafkaError) else KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, str(e))
                return
            dirs = []
            for r in response["results"]:
                code = ErrorCode.of(r["error_code"])
                replicas = {
                    (t["name"], p["partition_index"]): ReplicaInfo(
                        p["partition_size"], p["offset_lag"], p["is_future_key"]
                    )
                    for t in r["topics"]
                    for p in t["partitions"]
                }
                error = None if code is ErrorCode.NONE else KafkaError(code, f"log dir {r['log_dir']}: {code.name}")
                dirs.append(LogDirInfo(r["log_dir"], error, replicas))
            out[broker_id] = dirs

        await asyncio.gather(*(ask(b) for b in ids))
        return {b: out[b] for b in ids}

    async def elect_leaders(
        self,
        partitions: Iterable[tuple[str, int]] | None = None,
        *,
        unclean: bool = False,
        timeout_ms: int = 30000,
    ) -> dict[tuple[str, int], KafkaError | None]:
        """Elect the preferred replica (``unclean``: any live replica of a leaderless partition) as
        leader of ``partitions`` (None: every partition), as kafka-leader-election does. Per
        partition: None when elected, else the KafkaError (ELECTION_NOT_NEEDED when its leader
        already is the one the election would choose)."""
        body: Message = {
            "election_type": 1 if unclean else 0,
            "topic_partitions": None,
            "timeout_ms": timeout_ms,
        }
        if partitions is not None:
            grouped: dict[str, list[int]] = {}
            for t, p in partitions:
                grouped.setdefault(t, []).append(p)
            body["topic_partitions"] = [{"topic": t, "partitions": ps} for t, ps in grouped.items()]
        for attempt in range(self.retries + 1):
            response = await self._to_controller(ELECT_LEADERS, body, timeout_ms / 1000.0 + 30.0)
            top = ErrorCode.of(response.get("error_code", 0))
            if top is ErrorCode.NOT_CONTROLLER and attempt < self.retries:
                self.cluster.controller_id = -1
                await asyncio.sleep(self.retry_backoff)
                continue
            if top is not ErrorCode.NONE:
                raise KafkaError(top, f"ElectLeaders: {top.name}")
            out: dict[tuple[str, int], KafkaError | None] = {}
            for t in response["replica_election_results"]:
                for p in t["partition_result"]:
                    code = ErrorCode.of(p["error_code"])
                    key = (t["topic"], p["partition_id"])
                    out[key] = (
                        None
                        if code is ErrorCode.NONE
                        else KafkaError(code, p.get("error_message") or f"{key[0]}-{key[1]}: {code.name}")
                    )
            return out
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "ElectLeaders: no controller answered")

    async def wait_for_topic(self, name: str, *, timeout: float = 30.0, exists: bool = True) -> None:
        """Wait until every partition of ``name`` has a leader (or, ``exists=False``, until it is gone)."""
        deadline = time.monotonic() + timeout
        while True:
            await self.cluster.refresh([name])
            tm = self.cluster.topics.get(name)
            if exists and tm is not None and tm.partitions and all(p.leader >= 0 for p in tm.partitions.values()):
                return
            if not exists and tm is None:
                return
            if time.monotonic() >= deadline:
                state = "ready" if exists else "deleted"
                raise KafkaTimeoutError(f"topic {name!r} was not {state} within {timeout:g}s")
            await asyncio.sleep(self.retry_backoff)


def _partition_assignments(assignments: Mapping[str, list[list[int]]] | None, name: str) -> list[Message] | None:
    if assignments is None or name not in assignments:
        return None
    return [{"broker_ids": list(replicas)} for replicas in assignments[name]]


def _create_entry(t: NewTopic) -> Message:
    if t.assignments:
        return {
            "name": t.name,
            "num_partitions": -1,
            "replication_factor": -1,
            "assignments": [
                {"partition_index": p, "broker_ids": list(ids)} for p, ids in sorted(t.assignments.items())
            ],
            "configs": [{"name": k, "value": v} for k, v in t.configs.items()],
        }
    return {
        "name": t.name,
        "num_partitions": t.num_partitions,
        "replication_factor": t.replication_factor,
        "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in t.configs.items()],
    }


def _describe(code: ErrorCode, name: str) -> str:
    if code is ErrorCode.TOPIC_ALREADY_EXISTS:
        return f"topic {name!r} already exists"
    if code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return f"topic {name!r} does not exist"
    return f"topic {name!r}: {code.name}"
