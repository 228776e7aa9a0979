"""One consumer group's state, as Kafka's group coordinator keeps it: members, generation, offsets.

The states and their moves (Kafka's names, shown by DescribeGroups)::

    Empty ──join──► PreparingRebalance ──all joined / rebalance timeout──► CompletingRebalance
      ▲                   ▲   (generation+1, the leader gets every member's metadata)  │
      │                   └──── a member joins, leaves or expires ◄──────── Stable ◄───┘
      └──── the last member leaves (generation+1)                   (the leader's SyncGroup
                                                                      assignment is stored)
    Dead: deleted, or its partition moved to another coordinator.

Nothing here does I/O or reads a clock: the coordinator passes ``now`` (monotonic seconds) and
persists what changed. Futures of members waiting in JoinGroup or SyncGroup live on the member.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field, replace
from enum import StrEnum

from headwater.protocol.schema import Message


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat: float = 0.0
    join_future: asyncio.Future[Message] | None = None
    sync_future: asyncio.Future[Message] | None = None

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def expired(self, now: float) -> bool:
        # A member waiting in JoinGroup is bounded by the rebalance timeout instead.
        return self.join_future is None and now > self.last_heartbeat + self.session_timeout_ms / 1000.0

    def answer_join(self, response: Message) -> None:
        if self.join_future is not None and not self.join_future.done():
            self.join_future.set_result(response)
        self.join_future = None

    def answer_sync(self, response: Message) -> None:
        if self.sync_future is not None and not self.sync_future.done():
            self.sync_future.set_result(response)
        self.sync_future = None


@dataclass
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int  # ms since the epoch


@dataclass
class Group:
    group_id: str
    partition: int  # of __consumer_offsets
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: member id -> deadline (monotonic s): told MEMBER_ID_REQUIRED, expected to join again with it
    pending: dict[str, float] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    rebalance_deadline: float = 0.0
    join_not_before: float = 0.0  # group.initial.rebalance.delay.ms for a group that was Empty

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """A joining member fits if the type matches and it shares a protocol with every member."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        return bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        common: set[str] | None = None
        for m in self.members.values():
            names = set(m.protocol_names())
            common = names if common is None else common & names
        return common or set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol among those all members support."""
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[next(n for n in m.protocol_names() if n in candidates)] += 1
        return max(sorted(votes), key=lambda n: votes[n])

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_future is not None for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def add(self, member: Member) -> None:
        self.members[member.member_id] = member
        self.pending.pop(member.member_id, None)
        if member.group_instance_id is not None:
            self.static[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        m = self.members.pop(member_id, None)
        if m is None:
            return None
        if m.group_instance_id is not None and self.static.get(m.group_instance_id) == member_id:
            del self.static[m.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return m

    def replace_static(self, instance: str, new_id: str) -> tuple[Member, Member]:
        """KIP-345: the member holding ``instance`` continues under ``new_id`` (same place in the
        member order, same assignment, leader if it was); returns (old, new). The old id is gone,
        so its process is fenced on its next request."""
        old_id = self.static[instance]
        old = self.members[old_id]
        new = replace(old, member_id=new_id, join_future=None, sync_future=None)
        self.members = {
            (new_id if mid == old_id else mid): (new if mid == old_id else m) for mid, m in self.members.items()
        }
        self.static[instance] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return old, new

    def join_response(self, member: Member) -> Message:
        """What JoinGroup answers a member when the join phase completes (the leader gets everyone)."""
        assert self.protocol is not None
        members = []
        if member.member_id == self.leader_id:
            members = [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata(self.protocol),
                }
                for m in self.members.values()
            ]
        return {
            "error_code": 0,
            "generation_id": self.generation,
            "protocol_name": self.protocol,
            "leader": self.leader_id or "",
            "member_id": member.member_id,
            "members": members,
        }

    def to_record(self, now_ms: int) -> Message:
        """The group metadata value (formats.group_value) for this group as it is now."""
        return {
            "protocol_type": self.protocol_type or "",
            "generation": self.generation,
            "protocol": self.protocol,
            "leader": self.leader_id,
            "current_state_timestamp": now_ms,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "rebalance_timeout": m.rebalance_timeout_ms,
                    "session_timeout": m.session_timeout_ms,
                    "subscription": m.metadata(self.protocol) if self.protocol else b"",
                    "assignment": m.assignment,
                }
                for m in self.members.values()
            ],
        }

    @classmethod
    def from_record(cls, group_id: str, partition: int, value: Message, now: float) -> Group:
        """A group loaded from its last metadata record: Stable with its members (who expire unless
        they heartbeat this coordinator within their session timeout), or Empty."""
        g = cls(group_id, partition)
        g.protocol_type = value["protocol_type"] or None
        g.generation = value["generation"]
        g.protocol = value["protocol"]
        g.state_timestamp_ms = value["current_state_timestamp"]
        for mv in value["members"]:
            protocol = g.protocol or ""
            m = Member(
                mv["member_id"],
                mv["group_instance_id"],
                mv["client_id"],
                mv["client_host"],
                mv["rebalance_timeout"] if mv["rebalance_timeout"] >= 0 else mv["session_timeout"],
                mv["session_timeout"],
                [(protocol, mv["subscription"])],
                mv["assignment"],
                last_heartbeat=now,
            )
            g.add(m)
        g.leader_id = value["leader"] if value["leader"] in g.members else next(iter(g.members), None)
        g.state = GroupState.STABLE if g.members else GroupState.EMPTY
        return g
