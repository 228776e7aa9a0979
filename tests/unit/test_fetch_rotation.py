"""Follower fetches start each request one partition further along (issue 9: none starves)."""

from __future__ import annotations

from headwater.broker.replica_fetcher import rotated


def test_follower_fetches_rotate_their_partition_order() -> None:
    parts = ["a-0", "a-1", "b-0"]
    firsts = [rotated(parts, r)[0] for r in range(1, 7)]
    assert firsts == ["a-1", "b-0", "a-0", "a-1", "b-0", "a-0"]  # each partition leads a request in turn
    assert all(sorted(rotated(parts, r)) == sorted(parts) for r in range(5))  # nothing dropped or doubled
    assert rotated([], 3) == []
