"""Consumer-group membership over the Kafka protocol, as Kafka's consumer (and librdkafka) does it.

A :class:`GroupMembership` belongs to a :class:`~headwater.client.consumer.Consumer` built with a
``group_id``; the consumer's ``subscribe``/``poll``/``commit`` use it. One background task keeps the
membership: it finds the coordinator (FindCoordinator), joins (JoinGroup, with the KIP-394
MEMBER_ID_REQUIRED step), assigns partitions when it is the leader (``range`` or ``roundrobin``,
:mod:`headwater.client.assignors`), syncs (SyncGroup), heartbeats every ``heartbeat_interval_ms``,
rejoins when the coordinator says REBALANCE_IN_PROGRESS, auto-commits every
``auto_commit_interval_ms``, and for a pattern subscription (and, as leader, for partition
counts) watches the metadata every ``metadata_max_age_ms``.

Rebalances are eager, as in Kafka 2.3: before rejoining, the member commits (with auto-commit)
and gives up its whole assignment (``on_partitions_revoked``); after the sync it gets its new one
(``on_partitions_assigned``), positioned at the group's committed offsets, or by
``auto_offset_reset`` where there are none.

Static membership (``group_instance_id``, KIP-345): the member sends its instance id with every
request and does not send LeaveGroup when it closes, so a restart within ``session_timeout_ms``
gets the same partitions back without a rebalance of the others. If another process takes the
instance id, this one is fenced: FENCED_INSTANCE_ID, raised by the next ``poll``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from headwater.client.assignors import ASSIGNORS, Assignment, Subscription, assignors_named, decode_subscription
from headwater.client.errors import KafkaConnectionError, KafkaTimeoutError, OffsetOutOfRangeError
from headwater.protocol.apis import (
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    SYNC_GROUP,
)
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.client.consumer import Consumer, ConsumerRecord

log = logging.getLogger("headwater.client.group")

TopicPartition = tuple[str, int]

_COORDINATOR_ERRORS = {
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}
_REJOIN_ERRORS = {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID}


class CommitFailedError(KafkaError):
    """The commit cannot be done: the group rebalanced (or this member was removed) since the
    offsets were read. The member rejoins; the records will be read again by whoever gets them."""


class FencedInstanceError(KafkaError):
    """Another process took this member's ``group_instance_id`` (FENCED_INSTANCE_ID): fatal."""


class _Retry(Exception):
    """The coordinator moved or is loading: look it up again and carry on."""


class RebalanceListener(Protocol):
    """Kafka's ConsumerRebalanceListener: either method may be a coroutine function."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Awaitable[None] | None: ...

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Awaitable[None] | None: ...


@dataclass(frozen=True)
class GroupConfig:
    """A group consumer's settings (Kafka consumer config names, with underscores)."""

    group_id: str
    group_instance_id: str | None = None
    session_timeout_ms: int = 10000
    rebalance_timeout_ms: int = 60000  # Kafka's max.poll.interval.ms is sent as this
    heartbeat_interval_ms: int = 3000
    partition_assignment_strategy: tuple[str, ...] = ("range", "roundrobin")
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    auto_offset_reset: str = "latest"
    metadata_max_age_ms: int = 300000
    max_partition_fetch_bytes: int = 1048576
    fetch_max_wait_ms: int = 500

    def __post_init__(self) -> None:
        if not self.group_id:
            raise ValueError("group_id must not be empty")
        if self.auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(
                f"auto_offset_reset must be 'earliest', 'latest' or 'none', not {self.auto_offset_reset!r}"
            )
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        assignors_named(self.partition_assignment_strategy)  # ValueError for an unknown name


class GroupMembership:
    """One consumer's membership of its group, and its positions in the assigned partitions."""

    def __init__(self, consumer: Consumer, config: GroupConfig) -> None:
        self.consumer = consumer
        self.cluster = consumer.cluster
        self.config = config
        self.assignors = assignors_named(config.partition_assignment_strategy)
        self.member_id = ""
        self.generation = -1
        self.leader = False
        self.coordinator: int | None = None
        self.assignment: frozenset[TopicPartition] = frozenset()
        self.positions: dict[TopicPartition, int] = {}
        self._topics: tuple[str, ...] = ()
        self._pattern: re.Pattern[str] | None = None
        self._listener: RebalanceListener | None = None
        self._rejoin = True
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._assigned = asyncio.Event()
        self._fatal: BaseException | None = None
        self._epoch = 0  # bumped whenever the assignment changes: a fetch begun before is dropped
        self._last_heartbeat = 0.0
        self._last_commit = time.monotonic()
        self._committed_positions: dict[TopicPartition, int] = {}
        self._last_metadata = 0.0
        self._assigned_counts: dict[str, int] = {}  # the leader's view of partition counts when it assigned
        self._closing = False
        self._lock = asyncio.Lock()  # one coordinator exchange at a time (join, commit, leave)

    # -- subscription ---------------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
        listener: RebalanceListener | None = None,
    ) -> None:
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe() takes either a list of topics or a pattern")
        if isinstance(topics, str):
            raise ValueError("subscribe() takes a list of topics, not one string (use [topic])")
        self._pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        self._topics = tuple(sorted(set(topics))) if topics is not None else ()
        self._listener = listener
        self.request_rejoin()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    def subscription(self) -> tuple[str, ...]:
        return self._topics

    def request_rejoin(self) -> None:
        self._rejoin = True
        self._wake.set()

    # -- the background task --------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self.cluster.retry_backoff
        while not self._closing:
            try:
                await self._step()
                backoff = self.cluster.retry_backoff
            except asyncio.CancelledError:
                raise
            except _Rejoin as e:
                log.info("group %s: %s; rejoining", self.config.group_id, e)
                continue
            except FencedInstanceError as e:
                log.error("group %s: %s", self.config.group_id, e)
                await self._lose_assignment()
                self._fatal = e
                self._assigned.set()
                return
            except _Retry as e:  # the coordinator moved or is loading: routine
                log.info("group %s: %s; finding the coordinator again", self.config.group_id, e)
                self.coordinator = None
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                log.warning("group %s: %s; finding the coordinator again", self.config.group_id, e or type(e).__name__)
                self.coordinator = None
            except KafkaError as e:
                if not e.code.retriable:
                    log.error("group %s: %s", self.config.group_id, e)
                    self._fatal = e
                    self._assigned.set()
                    return
                log.warning("group %s: %s; retrying", self.config.group_id, e)
            except Exception as e:  # a bug or bad bytes from a member: say so, stop the consumer
                log.exception("group %s: membership failed", self.config.group_id)
                self._fatal = e
                self._assigned.set()
                return
            else:
                continue
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def _step(self) -> None:
        if self.coordinator is None:
            await self._find_coordinator()
        if self._rejoin:
            await self._join_and_sync()
        now = time.monotonic()
        if now - self._last_heartbeat >= self.config.heartbeat_interval_ms / 1000.0:
            await self._heartbeat()
        if self.config.enable_auto_commit and now - self._last_commit >= self.config.auto_commit_interval_ms / 1000.0:
            self._last_commit = now
            await self._commit_quietly()
        if now - self._last_metadata >= self.config.metadata_max_age_ms / 1000.0:
            await self._check_metadata()
        if self._rejoin:
            return
        self._wake.clear()
        wait = min(self.config.heartbeat_interval_ms, self.config.auto_commit_interval_ms) / 1000.0
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=max(wait - (time.monotonic() - now), 0.01))
        except TimeoutError:
            pass

    async def _find_coordinator(self) -> None:
        r = await self.cluster.request(None, FIND_COORDINATOR, {"key": self.config.group_id, "key_type": 0})
        code = ErrorCode.of(r["error_code"])
        if code is not ErrorCode.NONE:
            raise _Retry(f"FindCoordinator answered {code.name}")
        node = int(r["node_id"])
        if node not in self.cluster.brokers:
            await self.cluster.refresh()
        self.coordinator = node
        log.info("group %s: coordinator is broker %d", self.config.group_id, node)

    async def _request(self, api: Any, body: Message, timeout: float | None = None) -> Message:
        if self.coordinator is None:
            await self._find_coordinator()
        assert self.coordinator is not None
        return await self.cluster.request(self.coordinator, api, body, timeout=timeout)

    def _check(self, code: ErrorCode, what: str) -> None:
        """Raise for a coordinator answer other than NONE; rejoin errors set the rejoin flag."""
        if code is ErrorCode.NONE:
            return
        if code in _COORDINATOR_ERRORS:
            raise _Retry(f"{what} answered {code.name}")
        if code is ErrorCode.FENCED_INSTANCE_ID:
            raise FencedInstanceError(
                code, f"{what}: group.instance.id {self.config.group_instance_id!r} is used by another member"
            )
        if code is ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if code in _REJOIN_ERRORS:
            self.request_rejoin()
            raise _Rejoin(code, f"{what}: {code.name}")
        raise KafkaError(code, f"{what}: {code.name}")

    # -- join and sync --------------------------------------------------------------------------

    async def _subscribed_topics(self) -> tuple[str, ...]:
        if self._pattern is None:
            return self._topics
        await self.cluster.refresh(all_topics=True)
        self._last_metadata = time.monotonic()
        pattern = self._pattern
        return tuple(sorted(t for t, tm in self.cluster.topics.items() if not tm.is_internal and pattern.fullmatch(t)))

    async def _join_and_sync(self) -> None:
        await self._give_up_assignment()
        self._topics = await self._subscribed_topics()
        metadata = Subscription(self._topics).encode()
        cfg = self.config
        async with self._lock:
            while True:
                body = {
                    "group_id": cfg.group_id,
                    "session_timeout_ms": cfg.session_timeout_ms,
                    "rebalance_timeout_ms": cfg.rebalance_timeout_ms,
                    "member_id": self.member_id,
                    "group_instance_id": cfg.group_instance_id,
                    "protocol_type": "consumer",
                    "protocols": [{"name": a.name, "metadata": metadata} for a in self.assignors],
                }
                r = await self._request(JOIN_GROUP, body, timeout=cfg.rebalance_timeout_ms / 1000.0 + 10.0)
                code = ErrorCode.of(r["error_code"])
                if code is ErrorCode.MEMBER_ID_REQUIRED:  # KIP-394: join again with the id given
                    self.member_id = r["member_id"]
                    continue
                if code is ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                    continue
                if code is ErrorCode.REBALANCE_IN_PROGRESS:
                    continue
                self._check(code, "JoinGroup")
                break
            self.member_id, self.generation = r["member_id"], int(r["generation_id"])
            self.leader = r["leader"] == self.member_id
            assignments: list[Message] = []
            if self.leader:
                plan = await self._assign(r["protocol_name"], r["members"])
                assignments = [{"member_id": m, "assignment": a.encode()} for m, a in plan.items()]
            body = {
                "group_id": cfg.group_id,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "group_instance_id": cfg.group_instance_id,
                "assignments": assignments,
            }
            s = await self._request(SYNC_GROUP, body)
            try:
                self._check(ErrorCode.of(s["error_code"]), "SyncGroup")
            except _Rejoin as e:
                log.info("group %s: %s; joining again", cfg.group_id, e)
                return
        assigned = Assignment.decode(bytes(s["assignment"])).partitions
        self._rejoin = False
        self._last_heartbeat = time.monotonic()
        await self._take_assignment(frozenset(assigned))

    async def _assign(self, protocol: str, members: list[Message]) -> dict[str, Assignment]:
        """The leader's plan: every member's subscription, the partition counts, the assignor."""
        assignor = ASSIGNORS.get(protocol)
        if assignor is None:
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"the group chose assignor {protocol!r}")
        subs = {m["member_id"]: decode_subscription(bytes(m["metadata"])) for m in members}
        topics = sorted({t for s in subs.values() for t in s.topics})
        if topics:
            await self.cluster.refresh(topics)
        counts = {t: len(self.cluster.topics[t].partitions) for t in topics if t in self.cluster.topics}
        self._assigned_counts = counts
        plan = assignor.assign(counts, subs)
        log.info(
            "group %s generation %d: leader assigned %d partition(s) of %d topic(s) to %d member(s) (%s)",
            self.config.group_id,
            self.generation,
            sum(len(v) for v in plan.values()),
            len(counts),
            len(subs),
            protocol,
        )
        return {m: Assignment(tuple(parts)) for m, parts in plan.items()}

    async def _take_assignment(self, assigned: frozenset[TopicPartition]) -> None:
        committed = await self.committed(sorted(assigned)) if assigned else {}
        positions: dict[TopicPartition, int] = {}
        for tp in sorted(assigned):
            offset = committed.get(tp)
            positions[tp] = offset if offset is not None else await self._reset_offset(tp)
        self.assignment, self.positions = assigned, positions
        self._committed_positions = {tp: o for tp, o in positions.items() if committed.get(tp) is not None}
        self._epoch += 1
        log.info(
            "group %s generation %d: assigned %s",
            self.config.group_id,
            self.generation,
            ", ".join(f"{t}-{p}" for t, p in sorted(assigned)) or "nothing",
        )
        await self._call_listener("on_partitions_assigned", set(assigned))
        self._assigned.set()

    async def _reset_offset(self, tp: TopicPartition) -> int:
        from headwater.client.consumer import EARLIEST, LATEST

        if self.config.auto_offset_reset == "none":
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"no committed offset for {tp[0]}-{tp[1]}")
        which = EARLIEST if self.config.auto_offset_reset == "earliest" else LATEST
        return (await self.consumer.list_offset(tp[0], tp[1], which)).offset

    async def _give_up_assignment(self) -> None:
        """Eager rebalancing: commit (auto-commit) and revoke everything before rejoining."""
        if not self.assignment:
            return
        if self.config.enable_auto_commit:
            await self._commit_quietly()
        revoked = set(self.assignment)
        self._clear_assignment()
        await self._call_listener("on_partitions_revoked", revoked)

    async def _lose_assignment(self) -> None:
        if self.assignment:
            revoked = set(self.assignment)
            self._clear_assignment()
            await self._call_listener("on_partitions_revoked", revoked)

    def _clear_assignment(self) -> None:
        self.assignment, self.positions = frozenset(), {}
        self._committed_positions = {}
        self._assigned.clear()
        self._epoch += 1

    async def _call_listener(self, method: str, partitions: set[TopicPartition]) -> None:
        fn: Callable[[set[TopicPartition]], Any] | None = getattr(self._listener, method, None)
        if fn is None:
            return
        try:
            result = fn(partitions)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("group %s: the rebalance listener's %s failed", self.config.group_id, method)

    # -- heartbeat and metadata -----------------------------------------------------------------

    async def _heartbeat(self) -> None:
        body = {
            "group_id": self.config.group_id,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": self.config.group_instance_id,
        }
        r = await self._request(HEARTBEAT, body)
        self._last_heartbeat = time.monotonic()
        try:
            self._check(ErrorCode.of(r["error_code"]), "Heartbeat")
        except _Rejoin as e:
            log.info("group %s: %s; rejoining", self.config.group_id, e)

    async def _check_metadata(self) -> None:
        """A pattern's topics changed, or (leader) a subscribed topic's partition count: rejoin."""
        self._last_metadata = time.monotonic()
        if self._pattern is not None:
            topics = await self._subscribed_topics()
            if topics != self._topics:
                log.info("group %s: the pattern now matches %s; rejoining", self.config.group_id, list(topics))
                self.request_rejoin()
                return
        if self.leader and self._topics:
            await self.cluster.refresh(self._topics)
            counts = {t: len(self.cluster.topics[t].partitions) for t in self._topics if t in self.cluster.topics}
            if counts != self._assigned_counts:
                log.info("group %s: partition counts changed to %s; rejoining", self.config.group_id, counts)
                self.request_rejoin()

    # -- fetching -------------------------------------------------------------------------------

    async def poll(self, max_wait_ms: int | None = None) -> list[ConsumerRecord]:
        """Records of the assigned partitions from their positions; [] when nothing came within
        the wait (or the group is rebalancing)."""
        if self._task is None:
            raise RuntimeError("subscribe() first")
        self._raise_fatal()
        wait = (self.config.fetch_max_wait_ms if max_wait_ms is None else max_wait_ms) / 1000.0
        started = time.monotonic()
        if not self._assigned.is_set():
            try:
                await asyncio.wait_for(self._assigned.wait(), timeout=wait)
            except TimeoutError:
                return []
            self._raise_fatal()
        epoch, positions = self._epoch, dict(self.positions)
        if not positions:
            await asyncio.sleep(max(wait - (time.monotonic() - started), 0.0))
            return []
        remaining = max(int((wait - (time.monotonic() - started)) * 1000), 0)
        requests = [(t, p, o) for (t, p), o in positions.items()]
        try:
            data = await self.consumer._fetch(
                requests, self.config.max_partition_fetch_bytes, remaining, 1, 52428800, partial=True
            )
        except OffsetOutOfRangeError as e:
            tp = (e.topic, e.partition)
            if self._epoch == epoch and tp in self.positions:
                self.positions[tp] = await self._reset_offset(tp)
                log.warning("group %s: %s; reset to %d", self.config.group_id, e, self.positions[tp])
            return []
        except (KafkaConnectionError, KafkaTimeoutError) as e:
            log.warning("group %s: fetch failed, retrying: %s", self.config.group_id, e)
            return []
        if self._epoch != epoch:  # the assignment changed while fetching: these may be someone else's now
            return []
        out: list[ConsumerRecord] = []
        for tp, d in sorted(data.items()):
            out.extend(r for r in d.records if r.offset >= positions[tp])
            if d.next_offset > self.positions.get(tp, d.next_offset):
                self.positions[tp] = d.next_offset
        return out

    def _raise_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    # -- offsets --------------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (next offset to read, per partition; default: the positions).
        CommitFailedError if the group rebalanced since; retries while the coordinator moves."""
        self._raise_fatal()
        todo = dict(self.positions if offsets is None else offsets)
        if not todo:
            return
        deadline = time.monotonic() + self.cluster.request_timeout
        while True:
            try:
                await self._commit_once(todo)
                return
            except (_Retry, KafkaConnectionError, KafkaTimeoutError) as e:
                if time.monotonic() > deadline:
                    raise KafkaTimeoutError(f"committing offsets of group {self.config.group_id}: {e}") from e
                self.coordinator = None
                await asyncio.sleep(self.cluster.retry_backoff)
            except _Rejoin as e:
                raise CommitFailedError(e.code, f"commit of group {self.config.group_id} failed: {e}") from e

    async def _commit_once(self, offsets: Mapping[TopicPartition, int]) -> None:
        topics: dict[str, list[Message]] = {}
        for (t, p), o in sorted(offsets.items()):
            topics.setdefault(t, []).append(
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": ""}
            )
        body = {
            "group_id": self.config.group_id,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": self.config.group_instance_id,
            "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        async with self._lock:
            r = await self._request(OFFSET_COMMIT, body)
        for t in r["topics"]:
            for p in t["partitions"]:
                self._check(ErrorCode.of(p["error_code"]), f"OffsetCommit of {t['name']}-{p['partition_index']}")
        self._committed_positions.update(offsets)

    async def _commit_quietly(self) -> None:
        """Auto-commit: what changed since the last commit; a failure is logged, not raised."""
        changed = {tp: o for tp, o in self.positions.items() if self._committed_positions.get(tp) != o}
        if not changed:
            return
        try:
            await self._commit_once(changed)
        except (_Rejoin, KafkaError) as e:
            log.warning("group %s: auto-commit failed: %s", self.config.group_id, e)

    async def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None: nothing committed) -- OffsetFetch."""
        wanted = sorted(set(partitions))
        topics: dict[str, list[int]] = {}
        for t, p in wanted:
            topics.setdefault(t, []).append(p)
        body = {
            "group_id": self.config.group_id,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
        }
        deadline = time.monotonic() + self.cluster.request_timeout
        while True:
            try:
                r = await self._request(OFFSET_FETCH, body)
                self._check(ErrorCode.of(r.get("error_code", 0)), "OffsetFetch")
                out: dict[TopicPartition, int | None] = dict.fromkeys(wanted)
                for t in r["topics"]:
                    for p in t["partitions"]:
                        self._check(ErrorCode.of(p["error_code"]), "OffsetFetch")
                        o = int(p["committed_offset"])
                        out[(t["name"], int(p["partition_index"]))] = o if o >= 0 else None
                return out
            except (_Retry, KafkaConnectionError) as e:
                if time.monotonic() > deadline:
                    raise KafkaTimeoutError(f"reading the offsets of group {self.config.group_id}: {e}") from e
                self.coordinator = None
                await asyncio.sleep(self.cluster.retry_backoff)

    # -- closing --------------------------------------------------------------------------------

    async def close(self) -> None:
        """Commit (auto-commit), revoke, and leave the group -- a static member does not leave:
        its session timeout removes it, so a restart in time keeps its partitions."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._fatal is not None or self._task is None:
            return
        try:
            if self.assignment and self.config.enable_auto_commit:
                await self._commit_quietly()
            await self._lose_assignment()
            if self.member_id and self.config.group_instance_id is None:
                r = await self._request(LEAVE_GROUP, {"group_id": self.config.group_id, "member_id": self.member_id})
                code = ErrorCode.of(r["error_code"])
                log.info("group %s: member %s left (%s)", self.config.group_id, self.member_id, code.name)
        except (_Retry, KafkaError, KafkaConnectionError, KafkaTimeoutError) as e:
            log.warning(
                "group %s: leaving the group failed (its session timeout will remove it): %s", self.config.group_id, e
            )


class _Rejoin(KafkaError):
    """The coordinator told this member to rejoin (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION,
    UNKNOWN_MEMBER_ID); the background task does."""
