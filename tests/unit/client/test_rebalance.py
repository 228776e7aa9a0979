"""Algorithm 1 (range assignment) vectors."""

from __future__ import annotations

import pytest

from headwater.client.rebalance import ConsumerThreadId, assign_group, range_assign, thread_ids


def test_even_split_twelve_partitions_three_consumers() -> None:
    threads = ["c1-0", "c2-0", "c3-0"]
    assert range_assign(range(12), threads) == {
        "c1-0": [0, 1, 2, 3],
        "c2-0": [4, 5, 6, 7],
        "c3-0": [8, 9, 10, 11],
    }


def test_remainder_goes_to_the_first_threads() -> None:
    # N = 10 // 3 = 3, M = 1: thread 0 gets 4, the others 3
    assert range_assign(range(10), ["a-0", "a-1", "b-0"]) == {
        "a-0": [0, 1, 2, 3],
        "a-1": [4, 5, 6],
        "b-0": [7, 8, 9],
    }
    # N = 5 // 3 = 1, M = 2: starts at i*N + min(i, M) = 0, 2, 4
    assert range_assign(range(5), ["x-0", "y-0", "z-0"]) == {"x-0": [0, 1], "y-0": [2, 3], "z-0": [4]}


def test_more_threads_than_partitions() -> None:
    assert range_assign([0, 1], ["a-0", "b-0", "c-0"]) == {"a-0": [0], "b-0": [1], "c-0": []}


def test_inputs_are_sorted_and_deduplicated() -> None:
    assert range_assign([3, 1, 2, 0, 1], ["b-0", "a-0"]) == {"a-0": [0, 1], "b-0": [2, 3]}


def test_thread_ids_sort_numerically_per_consumer() -> None:
    threads = thread_ids("g_host-1-abc", 11)
    assert threads[10] == "g_host-1-abc-10"
    got = range_assign(range(11), reversed(threads))
    assert got["g_host-1-abc-9"] == [9] and got["g_host-1-abc-10"] == [10]
    t = ConsumerThreadId("my-consumer-id-3")
    assert (t.consumer, t.thread) == ("my-consumer-id", 3)


def test_no_threads_and_no_partitions() -> None:
    assert range_assign(range(4), []) == {}
    assert range_assign([], ["a-0"]) == {"a-0": []}


@pytest.mark.parametrize("n_parts,n_threads", [(12, 3), (12, 5), (7, 7), (3, 8), (100, 7), (1, 1)])
def test_every_partition_assigned_exactly_once_and_balanced(n_parts: int, n_threads: int) -> None:
    threads = [f"c{i:02d}-0" for i in range(n_threads)]
    got = range_assign(range(n_parts), threads)
    flat = sorted(p for ps in got.values() for p in ps)
    assert flat == list(range(n_parts))
    sizes = [len(got[t]) for t in sorted(threads)]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the extra ones go to the first threads
    # contiguous ranges in thread order
    assert [p for t in sorted(threads) for p in got[t]] == list(range(n_parts))


def test_every_member_computes_the_same_answer() -> None:
    members = {"b": 2, "a": 1, "c": 3}
    threads = [t for m, n in members.items() for t in thread_ids(m, n)]
    answers = [range_assign(range(20), sorted(threads, key=lambda s: hash((s, k)))) for k in range(5)]
    assert all(a == answers[0] for a in answers)


def test_assign_group_per_topic() -> None:
    got = assign_group({"t1": range(4), "t2": range(2)}, {"t1": ["a-0", "b-0"], "t2": ["a-0"], "t3": ["a-0"]})
    assert got == {"t1": {"a-0": [0, 1], "b-0": [2, 3]}, "t2": {"a-0": [0, 1]}, "t3": {"a-0": []}}
