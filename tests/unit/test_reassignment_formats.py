"""kafka-reassign-partitions' JSON, proposals and throttle lists (headwater.reassignment)."""

from __future__ import annotations

import random

import pytest

from headwater.broker.controller.reassignment import parse_reassignment
from headwater.reassignment import (
    ReassignmentError,
    assign,
    format_reassignment,
    parse_reassignment_json,
    parse_topics_to_move,
    throttled_replicas,
)


def test_reassignment_json_round_trip_and_controller_reading() -> None:
    text = '{"version":1,"partitions":[{"topic":"t","partition":1,"replicas":[4,2]},{"topic":"t","partition":0,"replicas":[2,3]}]}'
    parsed = parse_reassignment_json(text)
    assert parsed == {("t", 1): [4, 2], ("t", 0): [2, 3]}
    assert parse_reassignment_json(format_reassignment(parsed)) == parsed
    assert parse_reassignment(format_reassignment(parsed).encode()) == parsed


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"partitions": []}',
        '{"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}',
        '{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}',
        '{"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}, {"topic": "t", "partition": 0, "replicas": [2]}]}',
        '{"partitions": [{"topic": "t", "partition": "0", "replicas": [1]}]}',
    ],
)
def test_bad_reassignment_json_is_refused(text: str) -> None:
    with pytest.raises(ReassignmentError):
        parse_reassignment_json(text)


def test_topics_to_move() -> None:
    assert parse_topics_to_move('{"version":1,"topics":[{"topic":"a"},{"topic":"b"}]}') == ["a", "b"]
    with pytest.raises(ReassignmentError):
        parse_topics_to_move('{"topics": []}')


def test_assign_spreads_leaders_and_never_repeats_a_broker() -> None:
    got = assign([2, 3, 4], 6, 2, random.Random(7))
    assert sorted(got) == list(range(6))
    for replicas in got.values():
        assert len(replicas) == 2 and len(set(replicas)) == 2 and set(replicas) <= {2, 3, 4}
    leaders = [rs[0] for rs in got.values()]
    assert sorted(leaders) == [2, 2, 3, 3, 4, 4]
    with pytest.raises(ReassignmentError):
        assign([1, 2], 1, 3)


def test_throttle_lists_name_current_replicas_as_leaders_and_added_ones_as_followers() -> None:
    current = {("t", 0): [1, 2], ("t", 1): [2, 3], ("u", 0): [1, 2]}
    proposed = {("t", 0): [4, 2], ("t", 1): [2, 3], ("u", 0): [3, 4]}
    leader, follower = throttled_replicas(current, proposed)
    assert leader == {"t": "0:1,0:2", "u": "0:1,0:2"}
    assert follower == {"t": "0:4", "u": "0:3,0:4"}
