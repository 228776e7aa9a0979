"""Follower truncation by leader epoch, round by round (KIP-101, KIP-279; defect 6 of issue 9).

The rounds are played with two real epoch caches, as the replica fetcher plays them over
OffsetsForLeaderEpoch: the leader's cache answers, the follower's truncates."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from headwater.broker.storage.fs import OsFileSystem
from headwater.broker.storage.leader_epoch import EpochEntry, LeaderEpochCache
from headwater.broker.truncation import truncation_step


def _cache(directory: Path, entries: Sequence[tuple[int, int]]) -> LeaderEpochCache:
    directory.mkdir()
    return LeaderEpochCache(OsFileSystem(), str(directory), [EpochEntry(*e) for e in entries])


def _truncate(
    tmp_path: Path,
    leader: Sequence[tuple[int, int]],
    leader_leo: int,
    follower: Sequence[tuple[int, int]],
    follower_leo: int,
    follower_hw: int = 0,
) -> tuple[int, int]:
    """Play the rounds; (the follower's log end offset afterwards, how many rounds it took)."""
    lc, fc = _cache(tmp_path / "leader", leader), _cache(tmp_path / "follower", follower)
    leo, ask, rounds = follower_leo, fc.latest_epoch, 0
    while True:
        rounds += 1
        assert rounds < 10, "truncation does not end"
        leader_epoch, end_offset = lc.end_offset_for(ask, leader_leo)
        target, again = truncation_step(fc, leo, follower_hw, ask, leader_epoch, end_offset)
        if target < leo:
            leo = target
            fc.truncate_from_end(target)
        if again is None:
            return leo, rounds
        ask = again


def test_a_follower_whose_latest_epoch_the_leader_never_had_truncates_where_the_logs_really_part(
    tmp_path: Path,
) -> None:
    # leader: e1 [0, 80), e2 [80, 200), e4 [200, 260); follower: e1 [0, 100), e3 [100, 150).
    # Offsets 80-100 hold e1 records on the follower and e2 records on the leader: they diverge.
    # One round (ask e3 -> (e2, 200)) stops at 100 and keeps them; a second (ask e1 -> (e1, 80)) does not.
    leo, rounds = _truncate(tmp_path, [(1, 0), (2, 80), (4, 200)], 260, [(1, 0), (3, 100)], 150)
    assert (leo, rounds) == (80, 2)


def test_one_round_when_the_leader_has_the_follower_latest_epoch(tmp_path: Path) -> None:
    # the follower went away in e2 with records the leader never got: cut at the leader's end of e2
    assert _truncate(tmp_path, [(1, 0), (2, 50), (3, 90)], 120, [(1, 0), (2, 50)], 110) == (90, 1)


def test_nothing_to_truncate_when_the_follower_is_a_prefix_of_the_leader(tmp_path: Path) -> None:
    assert _truncate(tmp_path, [(1, 0), (2, 50)], 120, [(1, 0), (2, 50)], 70) == (70, 1)


def test_several_rounds_each_about_an_older_epoch(tmp_path: Path) -> None:
    # the follower led twice (e3, e5) while the leader was away; the leader has e1, e2, e4, e6
    leo, rounds = _truncate(tmp_path, [(1, 0), (2, 30), (4, 60), (6, 90)], 100, [(1, 0), (3, 40), (5, 70)], 95)
    assert leo == 30 and rounds == 3  # asks e5 -> (e4, 90): 70; e3 -> (e2, 60): 40; e1 -> (e1, 30): 30


def test_an_empty_answer_leaves_only_what_the_high_watermark_vouches_for(tmp_path: Path) -> None:
    assert _truncate(tmp_path, [], 0, [(1, 0)], 40, follower_hw=25) == (25, 1)
