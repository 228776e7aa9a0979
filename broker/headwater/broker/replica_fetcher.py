"""Followers replicate by fetching from their leader, as consumers do (with their broker id).

One fetcher task per leader broker serves every partition this broker follows there:

1. Truncation by leader epoch first (KIP-101/279): ask the leader, with OffsetsForLeaderEpoch,
   where our latest epoch ends on its log, and truncate to that (or to our own end of the
   largest epoch both have); when the leader lacked the epoch, ask again about an older one
   until both agree (``headwater.broker.truncation``), so a returning replica never keeps a
   divergent tail. Never a blind truncation to the high watermark.
2. Then fetch from the log end offset: batches are appended with the leader's offsets and
   leader epochs (``append_as_follower``); the follower's high watermark is the leader's,
   capped at its own log end offset. A partial trailing batch is dropped and fetched again.
3. OFFSET_OUT_OF_RANGE: below the leader's log start, start again there; past its log end
   (only after an unclean election), truncate to it.

Replication throttle (KIP-73, replication_quota.py): while this broker's
``follower.replication.throttled.rate`` is exceeded, partitions it follows that are listed in their
topic's ``follower.replication.throttled.replicas`` and not in sync are left out of the fetch; the
bytes fetched for throttled partitions are recorded against the rate.

Fetch sessions (KIP-227, ``headwater.broker.fetch_session``): the first request is full (every
partition, session epoch 0) and the leader answers a session id; later requests list only the
partitions whose fetch offset, log start offset or leader epoch changed (or that joined), plus the
ones left out since (parked, throttled, removed) as forgotten, and the answer carries only partitions
with records, an error or a new high watermark. An idle follower so sends and receives next to
nothing. FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH (the leader restarted, or evicted
the session) or a lost connection: the next request is full again (and replaces the old session).

Nor does a round walk every partition on this side: the fetcher keeps each partition's fetch state
as last built and rebuilds only the partitions that changed since (``_dirty``): added, removed,
parked or unparked, truncated, or notified by the purgatory, which it listens to for each partition
it fetches (the log notifies every move of its log end or log start offset: appends, truncations,
its own retention, following the leader's log start). While the follower throttle is exceeded (and
one round after), every round rebuilds every partition, as the throttle depends on the rate and the
ISR.

Errors that mean "ask the controller" (NOT_LEADER_FOR_PARTITION, FENCED/UNKNOWN_LEADER_EPOCH)
park the partition for ``replica.fetch.backoff.ms`` until the next LeaderAndIsr moves it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from headwater.broker.broker_client import BrokerConnection, BrokerConnectionError
from headwater.broker.partition import Partition
from headwater.broker.truncation import truncation_step
from headwater.protocol.apis import FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.header import LOG_OVERHEAD, peek_offset_and_length

if TYPE_CHECKING:
    from headwater.broker.config import BrokerConfig
    from headwater.broker.purgatory import Purgatory
    from headwater.broker.replication_quota import ReplicationQuota
    from headwater.broker.storage.log_manager import LogManager

_T = TypeVar("_T")
log = logging.getLogger(__name__)

TP = tuple[str, int]
THROTTLED_BACKOFF_S = 0.1  # how often a fully throttled fetcher looks at the rate again


class FetcherHost(Protocol):
    """What the replica fetchers reach of the broker they run in."""

    broker_id: int
    config: BrokerConfig
    purgatory: Purgatory  # a fetched partition's log moves: its fetch state is built again
    follower_quota: ReplicationQuota  # follower.replication.throttled.rate (KIP-73)
    log_manager: LogManager | None  # log start offsets checkpointed after following the leader's


def complete_batches(records: bytes | memoryview) -> memoryview:
    """The longest prefix of whole batches (a fetch may end inside the last batch)."""
    view = memoryview(records)
    pos = 0
    n = len(view)
    while True:
        head = peek_offset_and_length(view, pos)
        if head is None or head[1] < 0 or pos + LOG_OVERHEAD + head[1] > n:
            return view[:pos]
        pos += LOG_OVERHEAD + head[1]


def rotated(items: list[_T], start: int) -> list[_T]:
    """``items`` starting at ``start`` (modulo their number), wrapping around.

    The leader fills a fetch response in request order up to ``replica.fetch.response.max.bytes``:
    with a fixed order and a large backlog, the partitions listed last would get nothing until the
    first ones caught up. Each request starts one further along, so none starves (as Kafka rotates
    its fetch sessions' partitions)."""
    if not items:
        return items
    k = start % len(items)
    return items[k:] + items[:k]


SESSION_ERRORS = (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH)


class SessionHandler:
    """The follower's half of a fetch session with one leader: which fetch state the leader holds
    for each partition, so a request needs to list only what changed."""

    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = 0  # 0: the next request is full (and opens a session)
        self.sent: dict[TP, tuple[int, int, int, int]] = {}

    def reset(self) -> None:
        """Start over with a full request (keeping the id, so the leader replaces that session)."""
        self.epoch = 0
        self.sent = {}

    def build(
        self, wanted: dict[TP, tuple[int, int, int, int]], changed: set[TP] | None = None
    ) -> tuple[int, int, list[TP], list[TP]]:
        """(session_id, epoch, partitions to list, partitions to forget) for the next request, given
        each wanted partition's (fetch offset, log start offset, leader epoch, max bytes).
        ``changed``: the only partitions whose wanted state may differ from the last request's (so
        an idle round compares nothing); None: compare them all."""
        if self.epoch == 0:
            listed = list(wanted)
            forgotten: list[TP] = []
            self.sent = dict(wanted)
        elif changed is None:
            sent = self.sent
            listed = [tp for tp, st in wanted.items() if sent.get(tp) != st]
            forgotten = [tp for tp in sent if tp not in wanted]
            self.sent = dict(wanted)
        else:
            sent = self.sent
            listed, forgotten = [], []
            for tp in changed:
                st = wanted.get(tp)
                if st is None:
                    if sent.pop(tp, None) is not None:
                        forgotten.append(tp)
                elif sent.get(tp) != st:
                    sent[tp] = st
                    listed.append(tp)
        return self.session_id, self.epoch, listed, forgotten

    def on_response(self, error_code: int, session_id: int) -> None:
        if error_code in SESSION_ERRORS:
            log.info("fetch session %d: %s; sending a full fetch", self.session_id, ErrorCode.of(error_code).name)
            self.session_id = 0
            self.reset()
        elif error_code != ErrorCode.NONE:
            self.reset()
        elif self.epoch == 0:
            self.session_id = session_id
            self.epoch = 1 if session_id != 0 else 0  # 0: the leader gave no session; full again
        else:
            self.epoch = 1 if self.epoch >= 0x7FFFFFFF else self.epoch + 1


@dataclass
class FetchState:
    partition: Partition
    leader_epoch: int
    truncated: bool = False
    parked_until: float = 0.0
    ask_epoch: int | None = None  # the next truncation round's epoch (None: our latest)


class _Changes:
    """The purgatory listener of one partition a fetcher fetches: a notification (its log moved)
    means its fetch state is to be built again."""

    __slots__ = ("dirty", "tp")

    def __init__(self, dirty: set[TP], tp: TP) -> None:
        self.dirty = dirty
        self.tp = tp

    def notified(self) -> None:
        self.dirty.add(self.tp)


class ReplicaFetcher:
    def __init__(self, broker: FetcherHost, leader_id: int, endpoint: tuple[str, int]) -> None:
        self.broker = broker
        self.leader_id = leader_id
        self.endpoint = endpoint
        self.partitions: dict[TP, FetchState] = {}
        self.wake = asyncio.Event()
        cfg = broker.config
        self.conn = BrokerConnection(
            endpoint[0],
            endpoint[1],
            f"broker-{broker.broker_id}-fetcher-{leader_id}",
            security=cfg.inter_broker_security,
        )
        self.max_wait_ms = cfg.replica_fetch_wait_max_ms
        self.backoff_s = cfg.replica_fetch_backoff_ms / 1000.0
        self.closed = False
        self._rounds = 0  # fetch requests sent: where the next one starts its partition list
        self.session = SessionHandler()
        # What a round builds from: partitions parked or not yet truncated, the fetch state of every
        # other one as last built, and those to build again (see the module docstring).
        self._parked: set[TP] = set()
        self._untruncated: set[TP] = set()
        self._wanted: dict[TP, tuple[int, int, int, int]] = {}
        self._dirty: set[TP] = set()
        self._listeners: dict[TP, _Changes] = {}
        self._throttling = False  # the last round found the follower throttle exceeded
        self.task = asyncio.ensure_future(self._run())

    def add(self, part: Partition) -> None:
        tp = part.key
        self.partitions[tp] = FetchState(part, part.leader_epoch)
        self._untruncated.add(tp)
        self._parked.discard(tp)
        self._dirty.add(tp)
        if tp not in self._listeners:
            self._listeners[tp] = _Changes(self._dirty, tp)
            self.broker.purgatory.listen(tp, self._listeners[tp])
        self.wake.set()

    def remove(self, tp: TP) -> None:
        self.partitions.pop(tp, None)
        self._untruncated.discard(tp)
        self._parked.discard(tp)
        self._dirty.add(tp)
        listener = self._listeners.pop(tp, None)
        if listener is not None:
            self.broker.purgatory.unlisten(tp, listener)

    async def stop(self) -> None:
        self.closed = True  # checked too: Python 3.11's wait_for can swallow a cancel (gh-86296)
        self.task.cancel()
        self.conn.close()
        for tp, listener in self._listeners.items():
            self.broker.purgatory.unlisten(tp, listener)
        self._listeners.clear()
        await asyncio.wait([self.task], timeout=5)

    async def _run(self) -> None:
        while not self.closed:
            now = time.monotonic()
            self._unpark(now)
            if len(self._parked) >= len(self.partitions):  # nothing to fetch now
                self.wake.clear()
                soonest = min((self.partitions[tp].parked_until for tp in self._parked), default=now + 1.0)
                try:
                    await asyncio.wait_for(self.wake.wait(), max(0.01, soonest - now))
                except TimeoutError:
                    pass
                continue
            try:
                pending = {tp: self.partitions[tp] for tp in self._untruncated if tp not in self._parked}
                if pending:
                    await self._truncate(pending)
                if len(self.partitions) > len(self._parked | self._untruncated):  # some are ready
                    await self._fetch()
            except BrokerConnectionError as e:
                log.info("fetcher for leader %d: %s; retrying", self.leader_id, e)
                self.conn.close()
                self.session.reset()
                await asyncio.sleep(self.backoff_s)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("fetcher for leader %d failed", self.leader_id)
                self.session.reset()
                await asyncio.sleep(self.backoff_s)

    def _current(self, tp: TP, s: FetchState) -> bool:
        """Is this fetch state still the partition's role (no LeaderAndIsr came in meanwhile)?"""
        return (
            self.partitions.get(tp) is s and s.partition.leader_epoch == s.leader_epoch and s.partition.log is not None
        )

    def _park(self, tp: TP, s: FetchState, why: str) -> None:
        log.info("%s-%d: fetch from leader %d parked: %s", *tp, self.leader_id, why)
        s.parked_until = time.monotonic() + self.backoff_s
        if self.partitions.get(tp) is s:
            self._parked.add(tp)
            self._dirty.add(tp)

    def _unpark(self, now: float) -> None:
        if self._parked:
            for tp in [tp for tp in self._parked if self.partitions[tp].parked_until <= now]:
                self._parked.discard(tp)
                self._dirty.add(tp)

    def _set_truncated(self, tp: TP, s: FetchState, done: bool) -> None:
        s.truncated = done
        if done and self.partitions.get(tp) is s:
            self._untruncated.discard(tp)
            self._dirty.add(tp)

    async def _truncate(self, pending: dict[TP, FetchState]) -> None:
        topics: dict[str, list[dict[str, int]]] = {}
        for (t, p), st in pending.items():
            assert st.partition.log is not None
            latest = st.partition.log.leader_epoch_cache.latest_epoch if st.ask_epoch is None else st.ask_epoch
            st.ask_epoch = latest
            if latest < 0:
                self._set_truncated((t, p), st, True)  # nothing with an epoch: nothing can diverge
                st.ask_epoch = None
                continue
            topics.setdefault(t, []).append(
                {"partition": p, "current_leader_epoch": st.leader_epoch, "leader_epoch": latest}
            )
        if not topics:
            return
        resp = await self.conn.request(
            OFFSET_FOR_LEADER_EPOCH,
            {
                "replica_id": self.broker.broker_id,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            },
        )
        for t in resp["topics"]:
            for r in t["partitions"]:
                tp = (t["topic"], r["partition"])
                s = pending.get(tp)
                if s is None or not self._current(tp, s):
                    continue
                if r["error_code"] != ErrorCode.NONE:
                    self._park(tp, s, ErrorCode.of(r["error_code"]).name)
                    continue
                log_ = s.partition.log
                assert log_ is not None
                leader_epoch, end_offset = r["leader_epoch"], r["end_offset"]
                leo = log_.log_end_offset
                requested = s.ask_epoch if s.ask_epoch is not None else -1
                target, again = truncation_step(
                    log_.leader_epoch_cache, leo, s.partition.high_watermark, requested, leader_epoch, end_offset
                )
                if target < leo:
                    log.info(
                        "%s-%d: truncating from %d to %d (asked about epoch %d: leader %d has epoch %d ending at %d)",
                        *tp,
                        leo,
                        target,
                        requested,
                        self.leader_id,
                        leader_epoch,
                        end_offset,
                    )
                    log_.truncate_to(target)
                    s.partition.high_watermark = min(s.partition.high_watermark, target)
                # KIP-279: the leader lacked the epoch we asked about; ask again about an older one
                s.ask_epoch = again
                self._set_truncated(tp, s, again is None)

    def _build_wanted(self) -> set[TP] | None:
        """Bring ``_wanted`` (each ready partition's fetch offset, log start offset, leader epoch,
        max bytes) up to date; returns the partitions whose entry may have changed, or None when all
        were rebuilt (the follower throttle: it depends on the rate and the ISR, not on events)."""
        quota = self.broker.follower_quota
        over = quota.is_quota_exceeded()
        max_bytes = self.broker.config.replica_fetch_max_bytes
        changed: set[TP] | None
        if over or self._throttling:
            self._throttling = over
            self._wanted, changed = {}, None
            candidates: list[TP] | set[TP] = list(self.partitions)
        else:
            candidates = changed = set(self._dirty)
        wanted = self._wanted
        for tp in candidates:
            st = self.partitions.get(tp)
            log_ = st.partition.log if st is not None else None
            if (
                st is None
                or log_ is None
                or tp in self._parked
                or tp in self._untruncated
                or (over and self.broker.broker_id not in st.partition.isr and quota.is_throttled(tp))
            ):
                wanted.pop(tp, None)
            else:
                wanted[tp] = (log_.log_end_offset, log_.log_start_offset, st.leader_epoch, max_bytes)
        self._dirty.clear()  # (the listeners hold this very set)
        return changed

    async def _fetch(self) -> None:
        cfg = self.broker.config
        quota = self.broker.follower_quota
        max_bytes = cfg.replica_fetch_max_bytes
        changed = self._build_wanted()
        wanted = self._wanted
        if not wanted:  # every partition is throttled right now: wait for the rate to drop
            await asyncio.sleep(THROTTLED_BACKOFF_S)
            return
        self._rounds += 1
        session_id, epoch, listed, forgotten = self.session.build(wanted, changed)
        topics: dict[str, list[dict[str, int]]] = {}
        for t, p in rotated(listed, self._rounds):
            fetch_offset, log_start, leader_epoch, _ = wanted[(t, p)]
            topics.setdefault(t, []).append(
                {
                    "partition": p,
                    "current_leader_epoch": leader_epoch,
                    "fetch_offset": fetch_offset,
                    "log_start_offset": log_start,
                    "partition_max_bytes": max_bytes,
                }
            )
        gone: dict[str, list[int]] = {}
        for t, p in forgotten:
            gone.setdefault(t, []).append(p)
        body = {
            "replica_id": self.broker.broker_id,
            "max_wait_ms": self.max_wait_ms,
            "min_bytes": 1,
            "max_bytes": cfg.replica_fetch_response_max_bytes,
            "isolation_level": 0,
            "session_id": session_id,
            "session_epoch": epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in gone.items()],
            "rack_id": "",
        }
        try:
            resp = await self.conn.request(FETCH, body, timeout_s=self.max_wait_ms / 1000.0 + 30.0)
        except BaseException:
            self.session.reset()  # the leader may or may not have seen it: start over
            raise
        self.session.on_response(resp["error_code"], resp["session_id"])
        for t in resp["responses"]:
            for r in t["partitions"]:
                tp = (t["topic"], r["partition_index"])
                s = self.partitions.get(tp)
                if s is None or not s.truncated or not self._current(tp, s):
                    continue
                code = r["error_code"]
                if code == ErrorCode.NONE:
                    if r["records"] and quota.is_throttled(tp):
                        quota.record(len(r["records"]))
                    self._append(tp, s, r)
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    await self._out_of_range(tp, s)
                else:
                    self._park(tp, s, ErrorCode.of(code).name)

    def _append(self, tp: TP, s: FetchState, r: dict[str, object]) -> None:
        part = s.partition
        log_ = part.log
        assert log_ is not None
        records = r["records"]
        if records:
            assert isinstance(records, (bytes, memoryview))
            whole = complete_batches(records)
            if len(whole):
                try:
                    log_.append_as_follower(whole)
                except KafkaError as e:
                    self._park(tp, s, f"append failed: {e}")
                    return
        hw = r["high_watermark"]
        assert isinstance(hw, int)
        part.update_follower_high_watermark(hw)
        leader_start = r["log_start_offset"]
        assert isinstance(leader_start, int)
        if leader_start > log_.log_start_offset:  # DeleteRecords on the leader: follow it (Kafka does)
            log_.advance_log_start_offset(min(leader_start, log_.log_end_offset), "the leader's log start offset")
            if self.broker.log_manager is not None:
                self.broker.log_manager.checkpoint_log_start_offsets()

    async def _out_of_range(self, tp: TP, s: FetchState) -> None:
        log_ = s.partition.log
        assert log_ is not None
        offsets = {}
        for ts in (-2, -1):
            resp = await self.conn.request(
                LIST_OFFSETS,
                {
                    "replica_id": self.broker.broker_id,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "name": tp[0],
                            "partitions": [
                                {"partition_index": tp[1], "current_leader_epoch": s.leader_epoch, "timestamp": ts}
                            ],
                        }
                    ],
                },
            )
            p = resp["topics"][0]["partitions"][0]
            if p["error_code"] != ErrorCode.NONE:
                self._park(tp, s, f"ListOffsets: {ErrorCode.of(p['error_code']).name}")
                return
            offsets[ts] = p["offset"]
        leader_start, leader_end = offsets[-2], offsets[-1]
        if log_.log_end_offset > leader_end:
            log.warning(
                "%s-%d: truncating to the leader's log end offset %d (unclean leader election?)", *tp, leader_end
            )
            log_.truncate_to(leader_end)
        else:
            log.info("%s-%d: starting over at the leader's log start offset %d", *tp, leader_start)
            log_.truncate_fully_and_start_at(leader_start)
        s.partition.high_watermark = min(s.partition.high_watermark, log_.log_end_offset)


class ReplicaFetcherManager:
    """One fetcher per leader broker, and the partitions waiting for their leader's endpoint.

    A follower may learn of its leader before it knows where that leader listens: after a full
    restart the controller can send LeaderAndIsr naming a leader that has not registered yet (so
    it is not among the request's ``live_leaders``), and this broker's metadata cache may not list
    it either. Such a partition waits here (``awaiting``) and starts fetching as soon as the
    leader's endpoint becomes known (:meth:`on_endpoints_known`, called on every UpdateMetadata),
    as Kafka's fetcher threads pick a leader up when it appears: it never stays out of its ISR
    while its leader runs (issue 38).
    """

    def __init__(self, broker: FetcherHost) -> None:
        self.broker = broker
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.leader_of: dict[TP, int] = {}
        #: partitions following a leader whose endpoint is not known yet: tp -> (partition, leader id)
        self.awaiting: dict[TP, tuple[Partition, int]] = {}
        self._stopping: set[asyncio.Future[None]] = set()

    def add_partition(self, part: Partition, leader_id: int, endpoint: tuple[str, int] | None) -> None:
        """Fetch ``part`` from ``leader_id`` at ``endpoint``; None: once that endpoint is known."""
        self.remove_partition(part.key)
        if endpoint is None:
            self.awaiting[part.key] = (part, leader_id)
            log.info("%s-%d: leader %d has no known endpoint yet; fetching once it is known", *part.key, leader_id)
            return
        f = self.fetchers.get(leader_id)
        if f is None or f.endpoint != endpoint:
            if f is not None:
                self._stopping.add(asyncio.ensure_future(f.stop()))
            f = self.fetchers[leader_id] = ReplicaFetcher(self.broker, leader_id, endpoint)
        f.add(part)
        self.leader_of[part.key] = leader_id

    def on_endpoints_known(self, endpoint_of: Callable[[int], tuple[str, int] | None]) -> int:
        """Start fetching the awaiting partitions whose leader ``endpoint_of`` now names (and that
        still follow that leader); returns how many started."""
        started = 0
        for tp, (part, leader_id) in list(self.awaiting.items()):
            if part.leader_id != leader_id or part.is_leader or part.log is None:
                del self.awaiting[tp]  # its role changed since (a LeaderAndIsr or a session loss)
                continue
            endpoint = endpoint_of(leader_id)
            if endpoint is not None:
                self.add_partition(part, leader_id, endpoint)
                started += 1
        if started:
            log.info("started fetching %d partition(s) whose leader's endpoint became known", started)
        return started

    def remove_partition(self, tp: TP) -> None:
        self.awaiting.pop(tp, None)
        leader = self.leader_of.pop(tp, None)
        if leader is not None and leader in self.fetchers:
            self.fetchers[leader].remove(tp)

    def remove_all(self) -> None:
        self.awaiting.clear()
        for tp in list(self.leader_of):
            self.remove_partition(tp)

    async def stop(self) -> None:
        self.awaiting.clear()
        await asyncio.gather(*self._stopping, return_exceptions=True)
        for f in list(self.fetchers.values()):
            await f.stop()
        self.fetchers.clear()
        self.leader_of.clear()
