"""Leader election rules (pure functions, no I/O), as Kafka's controller applies them.

- Offline partition: the first replica, in assignment order, that is alive and in the ISR.
  Only when the topic allows ``unclean.leader.election.enable`` may a live replica outside the
  ISR be chosen (its ISR then becomes just that replica); otherwise the partition stays offline.
- Preferred replica: the first replica of the assignment, if it is alive and in the ISR.
- Controlled shutdown: the first live ISR member that is not shutting down.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from headwater.zk.topics import PartitionState


@dataclass(frozen=True)
class LeaderAndIsr:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int

    def to_znode(self) -> bytes:
        """The partition's state znode (headwater.zk.topics.PartitionState, Kafka's version 1)."""
        return PartitionState(self.leader, self.leader_epoch, self.isr, self.controller_epoch).encode()

    def new_leader(self, leader: int, isr: tuple[int, ...], controller_epoch: int) -> LeaderAndIsr:
        return replace(
            self, leader=leader, isr=isr, leader_epoch=self.leader_epoch + 1, controller_epoch=controller_epoch
        )


def offline_leader(
    replicas: list[int], current: LeaderAndIsr, live: set[int], unclean: bool
) -> tuple[int, tuple[int, ...]] | None:
    """(leader, isr) for a partition whose leader is gone, or None when it must stay offline."""
    live_isr = tuple(r for r in current.isr if r in live)
    for r in replicas:
        if r in live and r in current.isr:
            return r, live_isr
    if unclean:
        for r in replicas:
            if r in live:
                return r, (r,)
    return None


def preferred_leader(replicas: list[int], current: LeaderAndIsr, live: set[int]) -> int | None:
    preferred = replicas[0]
    if preferred != current.leader and preferred in live and preferred in current.isr:
        return preferred
    return None


def shutdown_leader(replicas: list[int], current: LeaderAndIsr, live: set[int], shutting_down: set[int]) -> int | None:
    for r in replicas:
        if r in current.isr and r in live and r not in shutting_down:
            return r
    return None
