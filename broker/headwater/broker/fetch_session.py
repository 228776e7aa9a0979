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
- Epoch -1 with a session id closes that session (the request is then sessionless); epoch 0 with a
  session id closes it and opens a new one.
- At most ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's default 1000, 0: none). When
  full, a new session takes the slot of one unused for ``EVICTION_MS``, else of the weakest one if
  the newcomer is stronger: followers' (privileged) sessions over consumers', then more partitions
  over fewer, as Kafka's FetchSessionCache. A request that gets no slot is answered sessionless
  (session id 0) and keeps sending full requests.
- Every partition of a session is looked at on every read of that session (its ``fetch_ms``): the
  leader's ISR check treats a follower that was caught up on a partition when the session last
  read it as caught up at the session's last read (see ``Partition.out_of_sync``), so partitions an
  idle follower no longer lists do not drop out of the ISR; a follower that stops fetching stops the
  session's clock and is shrunk as before.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

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


@dataclass(eq=False)
class FetchSession:
    id: int
    replica_id: int
    #: the epoch the next request must carry
    epoch: int = 1
    partitions: dict[TP, CachedPartition] = field(default_factory=dict)
    last_used_ms: int = 0
    #: when the session was last read (every partition in it looked at) and the read before
    fetch_ms: int = 0
    prev_fetch_ms: int = 0
    closed: bool = False
    rounds: int = 0

    @property
    def privileged(self) -> bool:
        return self.replica_id >= 0

    def upsert(self, topic: str, p: dict[str, int]) -> None:
        key = (topic, p["partition"])
        e = self.partitions.get(key)
        if e is None:
            self.partitions[key] = CachedPartition(
                self,
                key,
                p["fetch_offset"],
                p["log_start_offset"],
                p["partition_max_bytes"],
                p["current_leader_epoch"],
            )
        else:
            e.fetch_offset = p["fetch_offset"]
            e.log_start_offset = p["log_start_offset"]
            e.max_bytes = p["partition_max_bytes"]
            e.current_leader_epoch = p["current_leader_epoch"]

    def forget(self, keys: Iterable[TP]) -> None:
        for k in keys:
            self.partitions.pop(k, None)

    def mark_read(self, now_ms: int) -> None:
        self.prev_fetch_ms = self.fetch_ms
        self.fetch_ms = now_ms
        self.last_used_ms = now_ms

    def next_epoch(self) -> None:
        self.epoch = 1 if self.epoch >= INT32_MAX else self.epoch + 1


class FetchSessionCache:
    def __init__(self, max_slots: int = DEFAULT_SLOTS) -> None:
        if max_slots < 0:
            raise ValueError(f"max.incremental.fetch.session.cache.slots must be >= 0, not {max_slots}")
        self.max_slots = max_slots
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

    def get(self, session_id: int, epoch: int, replica_id: int) -> FetchSession:
        """The session for an incremental request; raises KafkaError FETCH_SESSION_ID_NOT_FOUND
        (also for a session another replica id opened: its reads keep that follower in the ISR) or
        INVALID_FETCH_SESSION_EPOCH. The caller bumps the epoch once the request is accepted."""
        s = self.sessions.get(session_id)
        if s is None or s.replica_id != replica_id:
            raise KafkaError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, f"fetch session {session_id} not found")
        if epoch != s.epoch:
            raise KafkaError(
                ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                f"fetch session {session_id}: epoch {epoch}, expected {s.epoch}",
            )
        return s

    def remove(self, session_id: int) -> None:
        s = self.sessions.pop(session_id, None)
        if s is not None:
            s.closed = True

    def create(self, replica_id: int, size: int, now_ms: int) -> FetchSession | None:
        """A new session for a full request of ``size`` partitions, or None when no slot is free
        and none may be taken (then the request is answered sessionless)."""
        if self.max_slots == 0:
            return None
        if len(self.sessions) >= self.max_slots and not self._evict_for(replica_id >= 0, size, now_ms):
            return None
        sid = random.randint(1, INT32_MAX)
        while sid in self.sessions:
            sid = random.randint(1, INT32_MAX)
        s = FetchSession(sid, replica_id, last_used_ms=now_ms, fetch_ms=now_ms, prev_fetch_ms=now_ms)
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
