"""Load-aware placement as a pure function (mirror/placement.py): every partition owned once, the
fewest moves in the simple cases, nothing moved when balanced; the rates and placement znodes'
formats (mirror/group.py); the moving byte rate."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from headwater.mirror.config import MirrorConfigError, parse
from headwater.mirror.group import (
    ZkGroup,
    assign,
    decode_placement,
    decode_rates,
    encode_placement,
    encode_rates,
    owner_of,
)
from headwater.mirror.placement import ByteRates, balance, effective_owners, owned, place
from headwater.zk.json import ZnodeFormatError
from tests.mirror.fakes import FakeFetcher, FakeGroup, fake_mirror

TP = tuple[str, int]
MEMBERS = st.lists(st.sampled_from([f"m{i}" for i in range(6)]), min_size=1, max_size=6, unique=True)
PARTITIONS = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 30)), min_size=1, max_size=60, unique=True
)
RATE = st.floats(min_value=0, max_value=1e7, allow_nan=False)


@st.composite
def placements(draw: st.DrawFn) -> tuple[dict[TP, str], list[str], dict[TP, float], float]:
    members = draw(MEMBERS)
    partitions = draw(PARTITIONS)
    owners = {tp: draw(st.sampled_from(members)) for tp in partitions}
    rates = {tp: draw(RATE) for tp in partitions if draw(st.booleans())}
    tolerance = draw(st.floats(min_value=1.0, max_value=3.0))
    return owners, members, rates, tolerance


def _loads(owners: dict[TP, str], members: list[str], rates: dict[TP, float]) -> dict[str, float]:
    loads = dict.fromkeys(members, 0.0)
    for tp, m in owners.items():
        loads[m] += rates.get(tp, 0.0)
    return loads


@settings(max_examples=100, deadline=None)
@given(placements())
def test_every_partition_is_owned_once_by_a_live_member(
    case: tuple[dict[TP, str], list[str], dict[TP, float], float],
) -> None:
    owners, members, rates, tolerance = case
    new = balance(owners, members, rates, tolerance)
    assert set(new) == set(owners)
    assert set(new.values()) <= set(members)
    assert balance(owners, members, rates, tolerance) == new  # deterministic
    moved = [tp for tp in owners if new[tp] != owners[tp]]
    assert len(moved) <= len(owners)


@settings(max_examples=100, deadline=None)
@given(placements())
def test_nothing_moves_when_every_member_is_within_the_bound(
    case: tuple[dict[TP, str], list[str], dict[TP, float], float],
) -> None:
    owners, members, rates, tolerance = case
    total = sum(rates.get(tp, 0.0) for tp in owners)
    bound = tolerance * total / len(members)
    if all(load <= bound for load in _loads(owners, members, rates).values()):
        assert balance(owners, members, rates, tolerance) == owners


@settings(max_examples=100, deadline=None)
@given(placements())
def test_the_busiest_member_never_gets_busier(case: tuple[dict[TP, str], list[str], dict[TP, float], float]) -> None:
    owners, members, rates, tolerance = case
    before = _loads(owners, members, rates)
    after = _loads(balance(owners, members, rates, tolerance), members, rates)
    assert max(after.values()) <= max(before.values()) + 1e-6 * max(1.0, max(before.values()))


@settings(max_examples=100, deadline=None)
@given(
    n_members=st.integers(2, 6),
    cold=st.lists(st.floats(min_value=0, max_value=1000), min_size=1, max_size=40),
    hot_factor=st.floats(min_value=1.01, max_value=100),
    data=st.data(),
)
def test_a_hot_partitions_member_gives_away_everything_else(
    n_members: int, cold: list[float], hot_factor: float, data: st.DataObject
) -> None:
    """The issue's case: one partition over the bound on its own, the cold ones together within
    it. The hot one's member ends holding it alone, and only partitions that were on that member
    moved."""
    members = [f"m{i}" for i in range(n_members)]
    hot: TP = ("hot", 0)
    rates = {("cold", i): r for i, r in enumerate(cold)}
    rates[hot] = max(1.0, sum(cold)) * hot_factor
    bound = 1.25 * sum(rates.values()) / n_members
    assume(rates[hot] >= bound >= sum(cold))
    owners = {tp: data.draw(st.sampled_from(members)) for tp in rates}
    hot_member = owners[hot]
    new = balance(owners, members, rates)
    assert [tp for tp, m in new.items() if m == hot_member] == [hot]
    moved = {tp for tp in owners if new[tp] != owners[tp]}
    assert moved == {tp for tp, m in owners.items() if m == hot_member and tp != hot}


@settings(max_examples=100, deadline=None)
@given(
    n_members=st.integers(1, 5),
    base=st.integers(10, 1000),
    extra=st.floats(min_value=0.01, max_value=0.099),
    data=st.data(),
)
def test_one_move_when_one_partition_fixes_the_only_member_over_the_bound(
    n_members: int, base: int, extra: float, data: st.DataObject
) -> None:
    """Loaded members carry ``base`` each (ten partitions), one of them an extra small partition
    that puts it over the bound, and an idle member nothing: one move does it, and is made."""
    members = [f"m{i}" for i in range(n_members)]
    owners: dict[TP, str] = {}
    rates: dict[TP, float] = {}
    for i, m in enumerate(members):
        for j in range(10):
            owners[("t", i * 10 + j)] = m
            rates[("t", i * 10 + j)] = base / 10
    busy = data.draw(st.sampled_from(members))
    owners[("extra", 0)] = busy
    rates[("extra", 0)] = extra * base
    members.append("idle")
    total = sum(rates.values())
    mean = total / len(members)
    tolerance = data.draw(
        st.floats(min_value=base / mean * (1 + 1e-9), max_value=(base + extra * base) / mean, exclude_max=True)
    )
    bound = tolerance * total / len(members)  # as balance() computes it
    assume(base * (1 + 1e-6) < bound < (base + extra * base) * (1 - 1e-6))
    new = balance(owners, members, rates, tolerance)
    moved = [tp for tp in owners if new[tp] != owners[tp]]
    assert moved == [("extra", 0)] and new[("extra", 0)] == "idle"
    assert max(_loads(new, members, rates).values()) <= tolerance * mean


def test_two_hot_partitions_on_one_member_are_split() -> None:
    owners = {("t", 0): "m1", ("t", 1): "m1", ("t", 2): "m2", ("t", 3): "m3"}
    rates = {("t", 0): 50.0, ("t", 1): 50.0, ("t", 2): 1.0, ("t", 3): 1.0}
    new = balance(owners, ["m1", "m2", "m3"], rates)
    assert sorted(tp for tp, m in new.items() if m == "m1") == [("t", 1)]  # the larger (rate, partition) stays
    assert sum(1 for tp in owners if new[tp] != owners[tp]) == 2  # ("t", 1) away, and ("t", 2) off its receiver
    assert balance(new, ["m1", "m2", "m3"], rates) == new  # and then it stays


def test_no_rates_is_the_count_based_placement() -> None:
    members = ["m1", "m2", "m3"]
    partitions = [("t", p) for p in range(24)]
    assert place(partitions, members, {}, {}) == {}
    assert place(partitions, members, {}, dict.fromkeys(partitions, 0.0)) == {}
    for m in members:
        assert owned(partitions, members, {}, m) == assign(partitions, members, m)


@settings(max_examples=100, deadline=None)
@given(MEMBERS, PARTITIONS, st.data())
def test_overrides_of_members_that_left_go_to_the_rendezvous_owner(
    members: list[str], partitions: list[TP], data: st.DataObject
) -> None:
    overrides = {tp: data.draw(st.sampled_from([*members, "gone"])) for tp in partitions}
    owners = effective_owners(partitions, members, overrides)
    assert set(owners) == set(partitions)
    for tp, m in owners.items():
        assert m == (overrides[tp] if overrides[tp] != "gone" else owner_of(tp, sorted(members)))
    # the overrides place() publishes give back the balanced owners
    rates = {tp: float(data.draw(st.integers(0, 100))) for tp in partitions}
    published = place(partitions, members, overrides, rates)
    assert effective_owners(partitions, members, published) == balance(owners, members, rates)


def test_the_znode_formats_round_trip_and_bad_data_is_refused() -> None:
    rates = {("page-views", 0): 1234.5, ("page-views", 11): 0.0, ("clicks", 2): 7.0}
    assert decode_rates("/r", encode_rates(rates, 60)) == rates
    owners = {("page-views", 3): "mirror_host-1-abc", ("clicks", 0): "mirror_host-2-def"}
    assert decode_placement("/p", encode_placement(owners, 4, "mirror_host-1-abc")) == (owners, 4)
    for bad in (b"[]", b'{"rates": {"t": {"x": 1}}}', b'{"rates": {"t": {"0": "fast"}}}', b'{"rates": {"t": 1}}'):
        with pytest.raises(ZnodeFormatError):
            decode_rates("/r", bad)
    with pytest.raises(ZnodeFormatError):
        decode_placement("/p", b'{"owners": {"t": {"0": 7}}}')


def test_byte_rates_are_a_moving_rate_over_the_window() -> None:
    r = ByteRates(window_s=10)
    assert r.sample({("t", 0): 0}, now=0) == {}
    assert r.sample({("t", 0): 1000}, now=5) == {("t", 0): 200.0}
    assert r.sample({("t", 0): 2000, ("t", 1): 50}, now=10) == {("t", 0): 200.0}  # t-1 just taken over
    # the window moves on: the sample at 0 is dropped once the one at 5 is 10 s old
    assert r.sample({("t", 0): 2000, ("t", 1): 550}, now=15) == {("t", 0): 100.0, ("t", 1): 100.0}
    # a partition that went away and came back is measured from its return only
    assert r.sample({("t", 1): 600}, now=16) == {("t", 1): 550 / 6}
    assert r.sample({("t", 0): 2100, ("t", 1): 700}, now=17) == {("t", 1): 650 / 7}
    assert r.sample({("t", 0): 2200, ("t", 1): 700}, now=18) == {("t", 0): 100.0, ("t", 1): 650 / 8}


def test_the_placement_properties() -> None:
    base = {
        "clusters": "dc1, agg",
        "dc1.zookeeper.connect": "127.0.0.1:1",
        "agg.bootstrap.servers": "127.0.0.1:1",
        "dc1->agg.enabled": "true",
    }
    config = parse(base)
    assert (config.placement_tolerance, config.placement_interval_s) == (1.25, 60.0)
    config = parse({**base, "placement.load.tolerance": "1.5", "placement.rebalance.interval.seconds": "2"})
    assert (config.placement_tolerance, config.placement_interval_s) == (1.5, 2.0)
    assert not config.unknown
    for key, value, message in (
        ("placement.load.tolerance", "0.9", "placement.load.tolerance: 0.9 is not between 1 (the mean load) and 100"),
        ("placement.load.tolerance", "fast", "placement.load.tolerance: 'fast' is not a number"),
        ("placement.load.tolerance", "nan", "placement.load.tolerance: nan is not between 1 (the mean load) and 100"),
        ("placement.rebalance.interval.seconds", "0", "placement.rebalance.interval.seconds: 0 is not between 0.1"),
    ):
        with pytest.raises(MirrorConfigError, match=re.escape(message)):
            parse({**base, key: value})


def test_rates_and_placement_in_zookeeper(zk_connect: str) -> None:
    """Real ZooKeeper: a member's rates are read by another, go with its session; the placement is
    written over the version read only (a second leader's stale write changes nothing), and a
    change wakes the other members."""
    changes: list[int] = []
    a = ZkGroup(zk_connect, "mirror", "member-a", ["page-views"])
    b = ZkGroup(zk_connect, "mirror", "member-b", ["page-views"])
    a.start(lambda: None)
    b.start(lambda: changes.append(1))
    try:
        assert b.read_rates() == {} and b.read_placement() == ({}, None)
        a.publish_rates({("page-views", 0): 1000.0}, 60)
        a.publish_rates({("page-views", 0): 2000.0, ("page-views", 1): 5.0}, 60)
        assert b.read_rates() == {"member-a": {("page-views", 0): 2000.0, ("page-views", 1): 5.0}}
        woken = len(changes)
        assert a.write_placement({("page-views", 1): "member-b"}, None)
        assert not b.write_placement({("page-views", 1): "member-a"}, None)  # someone wrote first
        overrides, version = b.read_placement()
        assert overrides == {("page-views", 1): "member-b"} and version is not None
        assert b.write_placement({}, version)
        assert not a.write_placement({("page-views", 2): "member-a"}, version)  # stale: refused
        assert b.read_placement()[0] == {}
        deadline = time.monotonic() + 30
        while len(changes) == woken:
            assert time.monotonic() < deadline, "member-b's watch never fired"
            time.sleep(0.05)
        a.stop()
        assert b.read_rates() == {}  # the ephemeral node went with a's session
    finally:
        a.stop()
        b.stop()


def test_the_leader_waits_for_every_rate_then_writes_the_balanced_placement() -> None:
    """The leader's round (Mirror._evaluate_placement) on the fake group: nothing until every member
    published; up to three rounds while a partition has no rate; then the balanced placement,
    written once; a topic it did not plan keeps its overrides."""
    group = FakeGroup("m1", {"t": 6})
    group.member_list = ["m1", "m2", "m3"]
    m, f = fake_mirror(group, FakeFetcher())
    partitions = [("t", p) for p in range(6)]
    f.partitions = list(partitions)
    owners = effective_owners(partitions, group.member_list, {})
    hot = ("t", 0)
    assert sum(o == owners[hot] for o in owners.values()) > 1  # rendezvous put cold ones with the hot one
    group.topic_partitions["other"] = 1
    group.placement = {("other", 0): "m2", ("deleted", 0): "m3"}  # a topic this leader has not planned; a gone one
    group.placement_version = 4

    async def main() -> None:
        group.rates = {"m1": {}, "m2": {}}
        await m._evaluate_placement(f)  # m3 has not published
        assert group.placement_version == 4
        rates = {tp: (1e6 if tp == hot else 10.0) for tp in partitions}
        by_member = {member: {tp: rates[tp] for tp, o in owners.items() if o == member} for member in group.member_list}
        group.rates = {**by_member, owners[("t", 5)]: {}}
        if owners[("t", 5)] == owners[hot]:
            group.rates[owners[hot]] = {hot: 1e6}
        for _ in range(3):  # ("t", 5) has no rate yet: wait
            await m._evaluate_placement(f)
            assert group.placement_version == 4
        await m._evaluate_placement(f)  # then counted as 0
        assert group.placement_version == 5
        group.rates = by_member
        await m._evaluate_placement(f)
        placed = effective_owners(partitions, group.member_list, group.placement)
        assert [tp for tp, o in placed.items() if o == placed[hot]] == [hot]
        assert placed[hot] == owners[hot]
        assert group.placement[("other", 0)] == "m2" and ("deleted", 0) not in group.placement
        version = group.placement_version
        await m._evaluate_placement(f)  # balanced: nothing written
        assert group.placement_version == version

    asyncio.run(main())


@settings(max_examples=100, deadline=None)
@given(placements())
def test_a_second_evaluation_with_the_same_rates_moves_nothing(
    case: tuple[dict[TP, str], list[str], dict[TP, float], float],
) -> None:
    owners, members, rates, tolerance = case
    new = balance(owners, members, rates, tolerance)
    assert balance(new, members, rates, tolerance) == new
