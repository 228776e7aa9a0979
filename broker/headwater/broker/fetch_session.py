"""Incremental fetch sessions (KIP-227), the leader's side.

A Fetch v7+ with ``session_epoch`` 0 (a full request) creates a session: the leader answers its
``session_id`` and remembers each partition's fetch state (:class:`CachedPartition`). Later requests
name the session and the next epoch (1, 2, ...) and list only the partitions whose fetch state
changed (fetch offset, log start offset, leader epoch, max bytes) plus ``forgotten_topics_data``; the
answer lists only the partitions with records, an error, or a high watermark / log start offset other
than the one last sent. Idle followers then cost one tiny request and response per
``replica.fetch.wait.max.ms`` instead of every partition twice.

- Unknown session id: FETCH_SESSION_ID_NOT_FOUND; wrong epoch: INVALID_FETCH_SESSION_EPOCH. The
  follower answers either with a full request (epoch 0), which replaces its old session.
- A session belongs to the principal (and replica id) that opened it: another principal naming its
  id gets FETCH_SESSION_ID_NOT_FOUND, and its epoch -1 / 0 closes nothing (Kafka 2.3 does not bind
  sessions; its protection is the per-request Read check, which the fetch handler also makes). Ids
  come from ``secrets`` (not a seeded generator), so they cannot be predicted from earlier ones.
- Epoch -1 with a session id closes that session (the request is then sessionless); epoch 0 with a
  session id closes it and opens a new one.
- At most ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's default 1000, 0: none). When
  full, a new session takes the slot of one unused for ``EVICTION_MS``, else of the weakest one if
  the newcomer is stronger: followers' (privileged) sessions over consumers', then more partitions
  over fewer, as Kafka's FetchSessionCache. A request that gets no slot is answered sessionless
  (session id 0) and keeps sending full requests.
- Every partition of a session counts as looked at on every read of that session (its
  ``fetch_ms``): the leader's ISR check treats a follower that was caught up on a partition when the
  session last read it as caught up at the session's last read (see ``Partition.out_of_sync``), so
  partitions an idle follower no longer lists do not drop out of the ISR; a follower that stops
  fetching stops the session's clock and is shrunk as before.
- A read looks only at the session's *dirty* partitions (:attr:`FetchSession.dirty`): an incremental
  read that finds a partition idle (``handlers/fetch.py`` ``_idle``: nothing to answer, nothing the
  fetch would change) drops it from the set, and it comes back when something it depends on may
  have changed. The session listens to each of its partitions in the purgatory (registered once,
  not per request), so every ``Purgatory.notify`` of one marks it dirty and wakes the session's
  waiting Fetch. Invariant: at every read, a partition not in the set is idle, so skipping it is the
  read the old full walk would have made. What ``_idle`` depends on, and what marks the entry dirty:

  ====================================================  ============================================
  the client's fetch state (offset, log start, epoch)    :meth:`FetchSession.upsert` (listed again)
  what was last answered (high watermark, log start)     only changed for answered, so dirty, entries
  the partition's role, leader epoch, ISR, follower set  LeaderAndIsr / StopReplica / ZooKeeper session
                                                         lost / ISR write: ``purgatory.notify(_all)``
  its high watermark                                     every move notifies (append, follower fetch,
                                                         ISR change, becoming leader)
  its log end and log start offset                       the log's ``on_offsets_moved`` (append,
                                                         truncation, DeleteRecords, retention, cleaner)
  the follower's state here (log end, log start,         changed only by fetches: this entry's own
  ``session_entry``)                                     reads, or another fetch of the same replica,
                                                         which marks the entry it replaces dirty
  ====================================================  ============================================
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from headwater.broker.purgatory import Purgatory
from headwater.protocol.errors import ErrorCode, KafkaError

TP = tuple[str, int]
DEFAULT_SLOTS = 1000
EVICTION_MS = 120_000  # Kafka's min.incremental.fetch.session.eviction.ms
INT32_MAX = 0x7FFFFFFF


@dataclass(slots=True, eq=False)
class CachedPartition:
    """One partition of a session: the fetch state the client last sent, and what the leader last
    answered for it (-1: nothing yet, so the next answer carries it)."""

    session: FetchSession
    key: TP
    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int
    high_watermark: int = -1
    leader_log_start_offset: int = -1

    def live(self) -> bool:
        """Still the session's state for this partition (not forgotten, not replaced, session open)."""
        s = self.session
        return not s.closed and s.partitions.get(self.key) is self

    def notified(self) -> None:
        """Something its idleness depends on may have changed (the purgatory's listener call)."""
        self.session.mark_dirty(self)


def _settle(fut: asyncio.Future[bool], notified: bool) -> None:
    if not fut.done():
        fut.set_result(notified)


@dataclass(eq=False)
class FetchSession:
    id: int
    replica_id: int
    #: the KafkaPrincipal that opened it: only it may use or close the session
    principal: str = ""
    #: the epoch the next request must carry
    epoch: int = 1
    partitions: dict[TP, CachedPartition] = field(default_factory=dict)
    last_used_ms: int = 0
    #: when the session was last read (every partition in it looked at) and the read before
    fetch_ms: int = 0
    prev_fetch_ms: int = 0
    closed: bool = False
    rounds: int = 0
    #: where its partitions listen for notifications (None: a request's transient session)
    registry: Purgatory | None = None
    #: the partitions a read must look at (insertion order; see the module docstring)
    dirty: dict[TP, CachedPartition] = field(default_factory=dict)
    _waiters: set[asyncio.Future[bool]] = field(default_factory=set)
    #: Read on each topic of the session as last decided, valid while ``readable_key`` (the
    #: authorizer's ACL generation and the client's host) is unchanged: an incremental fetch then
    #: re-checks every partition of the session at a dict lookup each, and a changed ACL (or host)
    #: makes it ask the authorizer again
    readable: dict[str, bool] = field(default_factory=dict)
    #: how many of its partitions each topic has (what the per-request Read check walks)
    topics: dict[str, int] = field(default_factory=dict)
    readable_key: tuple[int, str] | None = None

    @property
    def privileged(self) -> bool:
        return self.replica_id >= 0

    def upsert(self, topic: str, p: dict[str, int]) -> None:
        key = (topic, p["partition"])
        e = self.partitions.get(key)
        if e is None:
            e = self.partitions[key] = CachedPartition(
                self,
                key,
                p["fetch_offset"],
                p["log_start_offset"],
                p["partition_max_bytes"],
                p["current_leader_epoch"],
            )
            self.topics[topic] = self.topics.get(topic, 0) + 1
            if self.registry is not None and not self.closed:
                self.registry.listen(key, e)
        else:
            e.fetch_offset = p["fetch_offset"]
            e.log_start_offset = p["log_start_offset"]
            e.max_bytes = p["partition_max_bytes"]
            e.current_leader_epoch = p["current_leader_epoch"]
        self.dirty[key] = e

    def forget(self, keys: Iterable[TP]) -> None:
        for k in keys:
            e = self.partitions.pop(k, None)
            if e is not None:
                left = self.topics[k[0]] - 1
                if left:
                    self.topics[k[0]] = left
                else:
                    del self.topics[k[0]]
                self._drop(e)

    def _drop(self, e: CachedPartition) -> None:
        if self.dirty.get(e.key) is e:
            del self.dirty[e.key]
        if self.registry is not None:
            self.registry.unlisten(e.key, e)

    def close(self) -> None:
        """Closed (removed or evicted): its partitions stop listening, a waiting read wakes up."""
        self.closed = True
        for e in self.partitions.values():
            self._drop(e)
        self.dirty.clear()
        for fut in list(self._waiters):
            _settle(fut, True)

    def mark_dirty(self, e: CachedPartition) -> None:
        """The next read looks at ``e`` again; a waiting read wakes up to do so now."""
        if e.live():
            self.dirty[e.key] = e
            for fut in list(self._waiters):
                _settle(fut, True)

    def mark_all_dirty(self) -> None:
        self.dirty = dict(self.partitions)

    def clean(self, e: CachedPartition) -> None:
        """A read found ``e`` idle: later reads skip it until it is marked dirty again."""
        if self.dirty.get(e.key) is e:
            del self.dirty[e.key]

    def candidates(self) -> list[CachedPartition]:
        """The entries the next incremental read looks at: the dirty ones, starting ``rounds`` further
        along each request, so none starves when the response fills up."""
        entries = list(self.dirty.values())
        if entries:
            k = self.rounds % len(entries)
            entries = entries[k:] + entries[:k]
        return entries

    async def wait(self, timeout_s: float) -> bool:
        """Until one of its partitions is notified (True) or ``timeout_s`` passes (False): one
        registration per request, whatever the session's size."""
        if timeout_s <= 0 or self.closed:
            return False
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self._waiters.add(fut)
        timer = loop.call_later(timeout_s, _settle, fut, False)
        try:
            return await fut
        finally:
            timer.cancel()
            self._waiters.discard(fut)

    def mark_read(self, now_ms: int) -> None:
        self.prev_fetch_ms = self.fetch_ms
        self.fetch_ms = now_ms
        self.last_used_ms = now_ms

    def next_epoch(self) -> None:
        self.epoch = 1 if self.epoch >= INT32_MAX else self.epoch + 1


class FetchSessionCache:
    """The sessions of one broker; ``registry`` is the purgatory their partitions listen in (None:
    sessions that are never notified, for tests of the cache alone)."""

    def __init__(self, max_slots: int = DEFAULT_SLOTS, registry: Purgatory | None = None) -> None:
        if max_slots < 0:
            raise ValueError(f"max.incremental.fetch.session.cache.slots must be >= 0, not {max_slots}")
        self.max_slots = max_slots
        self.registry = registry
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self._warned_ms: int | None = None

    def warn_due(self, now_ms: int) -> bool:
        """True at most once a minute: for the warning that a follower got no session."""
        if self._warned_ms is not None and now_ms - self._warned_ms < 60_000:
            return False
        self._warned_ms = now_ms
        return True

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int, epoch: int, replica_id: int, principal: str = "") -> FetchSession:
        """The session for an incremental request; raises KafkaError FETCH_SESSION_ID_NOT_FOUND
        (also for a session another replica id opened: its reads keep that follower in the ISR; and
        for one another principal opened) or INVALID_FETCH_SESSION_EPOCH (only to its owner). The
        caller bumps the epoch once the request is accepted."""
        s = self.sessions.get(session_id)
        if s is None or s.replica_id != replica_id or s.principal != principal:
            raise KafkaError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, f"fetch session {session_id} not found")
        if epoch != s.epoch:
            raise KafkaError(
                ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                f"fetch session {session_id}: epoch {epoch}, expected {s.epoch}",
            )
        return s

    def remove(self, session_id: int, principal: str | None = None) -> None:
        """Close a session (eviction: any; a request's epoch -1 / 0: only its owner's)."""
        s = self.sessions.get(session_id)
        if s is not None and (principal is None or s.principal == principal):
            del self.sessions[session_id]
            s.close()

    def create(self, replica_id: int, size: int, now_ms: int, principal: str = "") -> FetchSession | None:
        """A new session for a full request of ``size`` partitions, or None when no slot is free
        and none may be taken (then the request is answered sessionless)."""
        if self.max_slots == 0:
            return None
        if len(self.sessions) >= self.max_slots and not self._evict_for(replica_id >= 0, size, now_ms):
            return None
        sid = secrets.randbelow(INT32_MAX) + 1
        while sid in self.sessions:
            sid = secrets.randbelow(INT32_MAX) + 1
        s = FetchSession(
            sid,
            replica_id,
            principal,
            last_used_ms=now_ms,
            fetch_ms=now_ms,
            prev_fetch_ms=now_ms,
            registry=self.registry,
        )
        self.sessions[sid] = s
        return s

    def _evict_for(self, privileged: bool, size: int, now_ms: int) -> bool:
        stale = [s for s in self.sessions.values() if now_ms - s.last_used_ms > EVICTION_MS]
        if stale:
            victim = min(stale, key=lambda s: s.last_used_ms)
        else:
            victim = min(self.sessions.values(), key=lambda s: (s.privileged, len(s.partitions), s.last_used_ms))
            if (privileged, size) <= (victim.privileged, len(victim.partitions)):
                return False
        self.remove(victim.id)
        self.evictions += 1
        return True
