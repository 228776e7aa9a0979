"""Replica assignment (topic_admin.assign_replicas): partitions added later continue a topic's pattern."""

from __future__ import annotations

import pytest

from headwater.broker.topic_admin import assign_replicas

BROKERS = [1, 2, 3, 4, 5]
RACKS: dict[int, str | None] = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}


@pytest.mark.parametrize("racks", [None, RACKS], ids=["no-racks", "racks"])
@pytest.mark.parametrize("start_index", range(5))
def test_added_partitions_continue_the_topics_pattern(racks: dict[int, str | None] | None, start_index: int) -> None:
    whole = assign_replicas(BROKERS, 12, 3, racks, start_index=start_index)
    first = assign_replicas(BROKERS, 4, 3, racks, start_index=start_index)
    added = assign_replicas(BROKERS, 8, 3, racks, start_index=start_index, start_partition=4)
    assert sorted(added) == list(range(4, 12))
    assert {**first, **added} == whole


def test_added_partitions_are_rack_aware() -> None:
    added = assign_replicas(BROKERS, 10, 3, RACKS, start_index=2, start_partition=3)
    for p, replicas in added.items():
        assert len(set(replicas)) == 3, p
        assert len({RACKS[b] for b in replicas}) == 3, (p, replicas)
    leaders = [r[0] for r in added.values()]
    assert set(leaders) == set(BROKERS)  # leadership spread over every broker
