"""One partition as this broker sees it: its log, its leadership and its high watermark.

Until replication arrives (the cluster issue) a partition has one in-sync replica, the
leader, so the high watermark follows the log end offset on every append.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from headwater.broker.storage.log import AppendInfo, Log

from headwater.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


@dataclass
class Partition:
    topic: str
    index: int
    broker_id: int
    log: Log | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    isr: list[int] = field(default_factory=list)
    high_watermark: int = 0

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id and self.log is not None

    def become_leader(self, log_: Log, leader_epoch: int, isr: list[int]) -> None:
        was = self.is_leader and self.leader_epoch == leader_epoch
        self.log = log_
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.high_watermark = log_.log_end_offset
        if not was:
            log.info(
                "%s-%d: leader at epoch %d, log end offset %d",
                self.topic,
                self.index,
                leader_epoch,
                log_.log_end_offset,
            )

    def become_non_leader(self, leader_id: int, leader_epoch: int) -> None:
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch

    def require_leader(self) -> Log:
        if not self.is_leader or self.log is None:
            raise KafkaError(
                ErrorCode.NOT_LEADER_FOR_PARTITION, f"This server is not the leader for {self.topic}-{self.index}"
            )
        return self.log

    def append_as_leader(self, records: memoryview, acks: int, min_insync_replicas: int) -> AppendInfo:
        log_ = self.require_leader()
        if acks == -1 and len(self.isr) < min_insync_replicas:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {self.isr} is insufficient to satisfy the min.isr requirement of "
                f"{min_insync_replicas} for partition {self.topic}-{self.index}",
            )
        info = log_.append(records, self.leader_epoch)
        self.high_watermark = log_.log_end_offset
        return info
