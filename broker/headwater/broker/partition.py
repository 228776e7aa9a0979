"""One partition as this broker sees it: its log, its role, its ISR and its high watermark.

As leader, the partition tracks each follower's log end offset (the offset of its last fetch)
and when it was last caught up. The high watermark is the minimum log end offset over the ISR
and only ever moves forward; consumers read up to it. A follower that has not caught up for
``replica.lag.time.max.ms`` drops out of the ISR; one that reaches the high watermark (and the
current leader epoch's start) rejoins. ISR changes are written to ZooKeeper by the replica
manager (a conditional update) before they take effect here.

As follower, the high watermark is the leader's, capped at the local log end offset.
All of this runs on the event loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from headwater.broker.storage.log import AppendInfo, Log
from headwater.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from headwater.broker.fetch_session import CachedPartition

log = logging.getLogger(__name__)

UNKNOWN_OFFSET = -1


@dataclass
class FollowerState:
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0
    log_start_offset: int = UNKNOWN_OFFSET  # as the follower's last fetch said (Fetch v5+)
    #: the fetch session entry through which the follower last fetched this partition while caught
    #: up (None: not caught up then, or sessionless). While it is live, every read of the session
    #: saw the follower caught up here: reads that skip the partition need not touch this state.
    session_entry: CachedPartition | None = None

    def caught_up_ms(self) -> int:
        """When the follower was last caught up, counting its fetch session's reads (KIP-227)."""
        e = self.session_entry
        if e is not None and e.live():
            return max(self.last_caught_up_ms, e.session.fetch_ms)
        return self.last_caught_up_ms


@dataclass
class Partition:
    topic: str
    index: int
    broker_id: int
    log: Log | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    controller_epoch: int = -1
    zk_version: int = -1
    isr: list[int] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    high_watermark: int = 0
    leader_epoch_start_offset: int = 0
    followers: dict[int, FollowerState] = field(default_factory=dict)
    #: set while an ISR change is being written, so two writes never race
    isr_update_in_flight: bool = False
    #: an ISR expansion being written to ZooKeeper: its new member already counts for the high
    #: watermark (the "maximal ISR" of Kafka's KIP-497). Without it the high watermark could pass
    #: the joiner's log end while the write is in flight, and a controller that reads the written
    #: ISR could elect the joiner, which lacks records already acknowledged to acks=all producers.
    pending_isr: tuple[int, ...] = ()
    #: bumped each time this broker becomes leader after not leading: a waiting acks=all request
    #: is answered only by the leadership it was appended under (a new leader epoch with the same
    #: leader, as an ISR change by the controller makes, keeps it)
    leadership: int = 0

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.index)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id and self.log is not None

    def make_leader(
        self,
        log_: Log,
        leader_epoch: int,
        isr: list[int],
        replicas: list[int],
        zk_version: int,
        controller_epoch: int,
        now_ms: int,
    ) -> None:
        if not self.is_leader:
            self.leadership += 1
        self.log = log_
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.controller_epoch = controller_epoch
        self.zk_version = zk_version
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.leader_epoch_start_offset = log_.log_end_offset
        # Record where this epoch starts now (KAFKA-7415), so OffsetForLeaderEpoch answers a
        # follower's newer epoch correctly before the first append of the epoch.
        log_.maybe_assign_epoch_start_offset(leader_epoch, log_.log_end_offset)
        # Followers start unknown but "caught up now", so they get replica.lag.time.max.ms to fetch.
        self.followers = {r: FollowerState(last_caught_up_ms=now_ms) for r in replicas if r != self.broker_id}
        self.high_watermark = max(self.high_watermark, log_.log_start_offset)
        self.maybe_increment_high_watermark()
        # DEBUG: a LeaderAndIsr can hold thousands; the replica manager logs one line per request
        log.debug(
            "%s-%d: leader at epoch %d, ISR %s, log end offset %d, high watermark %d",
            self.topic,
            self.index,
            leader_epoch,
            self.isr,
            log_.log_end_offset,
            self.high_watermark,
        )

    def make_follower(
        self,
        log_: Log,
        leader_id: int,
        leader_epoch: int,
        isr: list[int],
        replicas: list[int],
        zk_version: int,
        controller_epoch: int,
    ) -> None:
        self.log = log_
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.controller_epoch = controller_epoch
        self.zk_version = zk_version
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.followers = {}
        self.high_watermark = min(self.high_watermark, log_.log_end_offset)
        log.debug("%s-%d: follower of broker %d at epoch %d", self.topic, self.index, leader_id, leader_epoch)

    def make_offline(self) -> None:
        """Stop acting as leader or follower (ZooKeeper session lost); the next LeaderAndIsr decides."""
        self.leader_id = -1
        self.leader_epoch = -1
        self.followers = {}

    def require_leader(self) -> Log:
        if not self.is_leader or self.log is None:
            raise KafkaError(
                ErrorCode.NOT_LEADER_FOR_PARTITION, f"This server is not the leader for {self.topic}-{self.index}"
            )
        return self.log

    def check_leader_epoch(self, epoch: int) -> None:
        """Reject a request carrying another leader epoch (KIP-320); -1 means the client does not say."""
        if epoch >= 0 and epoch != self.leader_epoch:
            code = ErrorCode.FENCED_LEADER_EPOCH if epoch < self.leader_epoch else ErrorCode.UNKNOWN_LEADER_EPOCH
            raise KafkaError(code, f"leader epoch {epoch} vs {self.leader_epoch} for {self.topic}-{self.index}")

    def append_as_leader(
        self, records: memoryview, acks: int, min_insync_replicas: int, *, coordinator: bool = False
    ) -> AppendInfo:
        log_ = self.require_leader()
        if acks == -1 and len(self.isr) < min_insync_replicas:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {self.isr} is insufficient to satisfy the min.isr requirement of "
                f"{min_insync_replicas} for partition {self.topic}-{self.index}",
            )
        info = log_.append(records, self.leader_epoch, coordinator=coordinator)
        self.maybe_increment_high_watermark()
        return info

    # -- leader: followers and the high watermark --------------------------------------------------

    def update_follower(
        self,
        replica_id: int,
        fetch_offset: int,
        now_ms: int,
        log_start_offset: int = -1,
        session_entry: CachedPartition | None = None,
    ) -> None:
        st = self.followers.get(replica_id)
        if st is None or self.log is None:
            return
        if log_start_offset >= 0:
            st.log_start_offset = log_start_offset
        e = st.session_entry
        if e is not None and e is session_entry and e.live():
            # the session's previous read skipped this partition: the follower was caught up then
            prev = e.session.prev_fetch_ms
            st.last_caught_up_ms = max(st.last_caught_up_ms, prev)
            st.last_fetch_ms = max(st.last_fetch_ms, prev)
        leader_leo = self.log.log_end_offset
        if fetch_offset >= leader_leo:
            st.last_caught_up_ms = now_ms
        elif fetch_offset >= st.last_fetch_leader_log_end_offset:
            st.last_caught_up_ms = max(st.last_caught_up_ms, st.last_fetch_ms)
        st.log_end_offset = fetch_offset
        st.last_fetch_leader_log_end_offset = leader_leo
        st.last_fetch_ms = now_ms
        st.session_entry = session_entry if fetch_offset >= leader_leo else None
        if e is not None and e is not session_entry:
            e.notified()  # its session's reads skip it only while this state is its own: look again

    def low_watermark(self) -> int:
        """The lowest log start offset of the leader and its in-sync followers (DeleteRecords'
        low_watermark): records below it are gone from every in-sync replica."""
        assert self.log is not None
        starts = [self.log.log_start_offset]
        for r in self.isr:
            st = self.followers.get(r)
            if st is not None:
                starts.append(st.log_start_offset)
        return min(starts)

    def maybe_increment_high_watermark(self) -> bool:
        if self.log is None or not self.is_leader:
            return False
        offsets = [self.log.log_end_offset]
        # the ISR, plus an expansion's joiner while it is written (a set is not built on this hot path)
        members = self.isr if not self.pending_isr else [*self.isr, *(r for r in self.pending_isr if r not in self.isr)]
        for r in members:
            if r == self.broker_id:
                continue
            st = self.followers.get(r)
            offsets.append(st.log_end_offset if st is not None else UNKNOWN_OFFSET)
        new_hw = min(offsets)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self.log.on_high_watermark(new_hw)  # completed transactions now stable
            return True
        return False

    def follower_to_add(self, replica_id: int) -> bool:
        """Should this follower (not in the ISR) join it now?"""
        st = self.followers.get(replica_id)
        return (
            st is not None
            and replica_id not in self.isr
            and st.log_end_offset >= self.high_watermark
            and st.log_end_offset >= self.leader_epoch_start_offset
        )

    def out_of_sync(self, now_ms: int, max_lag_ms: int) -> list[int]:
        return [
            r
            for r in self.isr
            if r != self.broker_id
            and (st := self.followers.get(r)) is not None
            and now_ms - st.caught_up_ms() > max_lag_ms
        ]

    # -- follower ----------------------------------------------------------------------------------

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        if self.log is not None:
            self.high_watermark = min(leader_high_watermark, self.log.log_end_offset)
            self.log.on_high_watermark(self.high_watermark)  # completed transactions now stable
