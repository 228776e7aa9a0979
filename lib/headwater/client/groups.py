"""Consumer groups as ``kafka-consumer-groups`` shows them: list, describe with lag, reset offsets, delete.

Groups live on their coordinators (FindCoordinator), so listing asks every broker (ListGroups);
describing asks the group's coordinator (DescribeGroups, OffsetFetch) and each partition's leader
for its log end offset (ListOffsets): lag = log end offset - committed offset. Member assignments
are decoded from the consumer protocol's bytes (version, topics[name, partitions[]], user data),
which every stock client uses for ``protocol_type`` "consumer".

Resetting commits new offsets the way an operator tool must: only while the group has no members
(Kafka refuses it otherwise; so do we), as a commit with generation -1.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from headwater.client.cluster import Cluster
from headwater.client.consumer import Consumer
from headwater.client.errors import KafkaError, KafkaTimeoutError
from headwater.client.security import ClientSecurity
from headwater.protocol.apis import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
)
from headwater.protocol.errors import DecodeError, ErrorCode
from headwater.protocol.primitives import Reader
from headwater.protocol.schema import Message

TopicPartition = tuple[str, int]

_RETRY = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR}


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None  # None: the group has committed nothing for it
    log_end_offset: int

    @property
    def lag(self) -> int | None:
        return None if self.committed is None else max(self.log_end_offset - self.committed, 0)


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    coordinator: int
    state: str
    protocol_type: str
    protocol: str
    members: tuple[GroupMember, ...]
    offsets: tuple[PartitionLag, ...] = field(default=())

    def owner_of(self, tp: TopicPartition) -> GroupMember | None:
        return next((m for m in self.members if tp in m.assignment), None)


def decode_assignment(data: bytes) -> tuple[TopicPartition, ...]:
    """The partitions of a consumer-protocol assignment (empty for bytes that are not one)."""
    if not data:
        return ()
    try:
        r = Reader(data)
        r.int16()  # version
        out: list[TopicPartition] = []
        for _ in range(r.array_length()):
            topic = r.string()
            out.extend((topic, r.int32()) for _ in range(r.array_length()))
        return tuple(out)
    except DecodeError:
        return ()


class GroupAdmin:
    """Reads and changes consumer groups through their coordinators."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        timeout_s: float = 30.0,
        client_id: str = "headwater-groups",
        security: ClientSecurity | Mapping[str, str] | None = None,
    ):
        self.timeout_s = timeout_s
        self.cluster = Cluster(bootstrap, client_id=client_id, allow_auto_create_topics=False, security=security)
        self._consumer = Consumer(bootstrap, cluster=self.cluster)

    async def __aenter__(self) -> GroupAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.cluster.close()

    async def coordinator(self, group_id: str) -> int:
        """The node id of the group's coordinator, retrying while it is being elected or loaded."""

        async def once() -> tuple[ErrorCode, int]:
            r = await self.cluster.request(None, FIND_COORDINATOR, {"key": group_id, "key_type": 0})
            return ErrorCode.of(r["error_code"]), int(r["node_id"])

        node = await self._retrying(f"finding the coordinator of group {group_id!r}", once)
        if node not in self.cluster.brokers:
            await self.cluster.refresh()
        return node

    async def _retrying(self, what: str, call: Callable[[], Awaitable[tuple[ErrorCode, int]]]) -> int:
        deadline = time.monotonic() + self.timeout_s
        while True:
            code, value = await call()
            if code is ErrorCode.NONE:
                return value
            if code not in _RETRY:
                raise KafkaError(code, f"{what}: {code.name}")
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"{what}: still {code.name} after {self.timeout_s:g}s")
            await asyncio.sleep(0.2)
            await self.cluster.refresh()

    async def list_groups(self) -> list[tuple[str, str, int]]:
        """(group id, protocol type, coordinator) of every group, from every broker."""
        await self.cluster.refresh()
        out: list[tuple[str, str, int]] = []
        for node in sorted(self.cluster.brokers):
            r = await self.cluster.request(node, LIST_GROUPS, {})
            code = ErrorCode.of(r["error_code"])
            if code is not ErrorCode.NONE:
                raise KafkaError(code, f"listing the groups of broker {node}: {code.name}")
            out.extend((g["group_id"], g["protocol_type"], node) for g in r["groups"])
        return sorted(out)

    async def describe(self, group_id: str, *, with_lag: bool = True) -> GroupDescription:
        node = await self.coordinator(group_id)
        r = await self.cluster.request(node, DESCRIBE_GROUPS, {"groups": [group_id]})
        g = r["groups"][0]
        code = ErrorCode.of(g["error_code"])
        if code is not ErrorCode.NONE:
            raise KafkaError(code, f"describing group {group_id!r}: {code.name}")
        members = tuple(
            GroupMember(
                m["member_id"], m["client_id"], m["client_host"], decode_assignment(bytes(m["member_assignment"]))
            )
            for m in g["members"]
        )
        desc = GroupDescription(group_id, node, g["group_state"], g["protocol_type"], g["protocol_data"], members)
        if not with_lag:
            return desc
        committed = await self.committed(group_id, node)
        wanted = set(committed) | {tp for m in members for tp in m.assignment}
        lags = []
        for tp in sorted(wanted):
            end = await self._consumer.latest_offset(*tp)
            lags.append(PartitionLag(tp[0], tp[1], committed.get(tp), end))
        return GroupDescription(
            desc.group_id, node, desc.state, desc.protocol_type, desc.protocol, members, tuple(lags)
        )

    async def committed(self, group_id: str, node: int | None = None) -> dict[TopicPartition, int]:
        """Every offset the group committed (OffsetFetch with all topics)."""
        node = await self.coordinator(group_id) if node is None else node
        r = await self.cluster.request(node, OFFSET_FETCH, {"group_id": group_id, "topics": None}, 3)
        code = ErrorCode.of(r["error_code"])
        if code is not ErrorCode.NONE:
            raise KafkaError(code, f"reading the offsets of group {group_id!r}: {code.name}")
        return {
            (t["name"], p["partition_index"]): int(p["committed_offset"])
            for t in r["topics"]
            for p in t["partitions"]
            if p["committed_offset"] >= 0
        }

    async def log_offsets(self, topic: str) -> dict[int, tuple[int, int]]:
        """partition -> (log start offset, log end offset)."""
        out = {}
        for p in await self._consumer.partitions_for(topic):
            out[p] = (await self._consumer.earliest_offset(topic, p), await self._consumer.latest_offset(topic, p))
        return out

    async def commit(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Commit ``offsets`` for a group without members (as ``--reset-offsets --execute`` does)."""
        node = await self.coordinator(group_id)
        topics: dict[str, list[Message]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append(
                {"partition_index": partition, "committed_offset": offset, "committed_metadata": ""}
            )
        body = {
            "group_id": group_id,
            "generation_id": -1,
            "member_id": "",
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        r = await self.cluster.request(node, OFFSET_COMMIT, body, 2)
        for t in r["topics"]:
            for p in t["partitions"]:
                code = ErrorCode.of(p["error_code"])
                if code is not ErrorCode.NONE:
                    why = " (the group has active members: stop them first)" if code in _ACTIVE else ""
                    raise KafkaError(code, f"committing {t['name']}-{p['partition_index']}: {code.name}{why}")

    async def delete(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        out = {}
        for group_id in group_ids:
            node = await self.coordinator(group_id)
            r = await self.cluster.request(node, DELETE_GROUPS, {"groups_names": [group_id]})
            out[group_id] = ErrorCode.of(r["results"][0]["error_code"])
        return out


_ACTIVE = {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.REBALANCE_IN_PROGRESS}
