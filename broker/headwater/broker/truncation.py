"""Where a follower truncates, one OffsetsForLeaderEpoch round at a time (KIP-101, KIP-279).

The follower asks the leader where epoch ``R`` ends on the leader's log (at first ``R`` is its own
latest epoch). The leader answers with the largest epoch ``E <= R`` it has and that epoch's end
offset ``O``. The follower truncates to ``min(O, its log end, its own end of the largest epoch <= E)``.

If ``E == R`` both logs agree up to there: done. If ``E < R`` the leader never had ``R``, and the
offsets before the truncation point may still diverge: the follower's records there may belong to
an epoch the leader does not have (an unclean election, leaders changing while replicas were away).
KIP-279: ask again, about the largest epoch the follower has at or below ``E``; each round asks about
a smaller epoch, so it ends. One round only (Kafka before 2.0) can leave replicas silently diverged:

    leader   e1 [0, 80)   e2 [80, 200)   e4 [200, ...)
    follower e1 [0, 100)  e3 [100, 150)
    round 1: ask e3 -> leader (e2, 200); follower's end for e2 is 100 (e1 ends there): truncate to 100
    round 2: ask e1 -> leader (e1, 80): truncate to 80, where the logs really part
"""

from __future__ import annotations

from headwater.broker.storage.leader_epoch import LeaderEpochCache

__all__ = ["truncation_step"]


def truncation_step(
    follower: LeaderEpochCache,
    log_end_offset: int,
    high_watermark: int,
    requested_epoch: int,
    leader_epoch: int,
    end_offset: int,
) -> tuple[int, int | None]:
    """The offset to truncate to after the leader answered ``(leader_epoch, end_offset)`` for
    ``requested_epoch``, and the epoch to ask about next (None: truncation is complete)."""
    if end_offset < 0:
        # The leader knows nothing about the epoch (an old leader, an empty cache): the high
        # watermark is all that is known to be common.
        return min(high_watermark, log_end_offset), None
    mine_epoch, mine_end = follower.end_offset_for(leader_epoch, log_end_offset)
    target = min(end_offset, log_end_offset, mine_end if mine_end >= 0 else log_end_offset)
    if leader_epoch == requested_epoch or mine_epoch < 0 or mine_epoch == leader_epoch:
        return target, None
    return target, mine_epoch
