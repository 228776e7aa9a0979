"""The group coordinator through the wire, one real broker: each Kafka error a client can meet, the
rebalance and session timeouts, static membership fencing, ZooKeeper-stored v0 offsets, and groups
and offsets loaded back from ``__consumer_offsets`` after a kill -9."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from kazoo.client import KazooClient

from headwater.broker.group.formats import OFFSETS_TOPIC
from headwater.protocol.apis import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    PRODUCE,
    SYNC_GROUP,
)
from headwater.protocol.errors import ErrorCode
from headwater.protocol.records.record import RecordInput, encode_batch
from tests.broker.wire import Wire
from tests.compat.test_stock_clients import create_topic
from tests.harness.broker import BrokerProcess

SESSION_MS = 1500  # allowed by group.min.session.timeout.ms below
BROKER = {
    "offsets_topic_replication_factor": 1,
    "offsets_topic_num_partitions": 2,
    "group_initial_rebalance_delay_ms": 0,
    "group_min_session_timeout_ms": 1000,
}


@pytest.fixture
def coordinator(broker_factory: Callable[..., BrokerProcess]) -> Iterator[BrokerProcess]:
    b = broker_factory(0, prometheus_port="auto", **BROKER)
    w = Wire(b.bootstrap)
    deadline = time.monotonic() + 30
    while w.request(FIND_COORDINATOR, 2, {"key": "any", "key_type": 0})["error_code"] != ErrorCode.NONE:
        assert time.monotonic() < deadline, "no coordinator"
        time.sleep(0.1)
    w.close()
    create_topic(b.bootstrap, "t", partitions=2)  # offsets are committed for partitions that exist
    yield b


def _join(b: BrokerProcess, group: str, member: str = "", version: int = 5, **kw: Any) -> dict[str, Any]:
    w = Wire(b.bootstrap, timeout=30)
    try:
        body = {
            "group_id": group,
            "session_timeout_ms": SESSION_MS,
            "rebalance_timeout_ms": kw.pop("rebalance_timeout_ms", 3000),
            "member_id": member,
            "group_instance_id": kw.pop("instance", None),
            "protocol_type": kw.pop("protocol_type", "consumer"),
            "protocols": kw.pop("protocols", [{"name": "range", "metadata": b"m-" + member.encode()}]),
        }
        return w.request(JOIN_GROUP, version, body)
    finally:
        w.close()


def _joined(b: BrokerProcess, group: str) -> dict[str, Any]:
    """A new member through KIP-394's two steps."""
    first = _join(b, group)
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED and first["member_id"]
    return _join(b, group, first["member_id"])


def _call(b: BrokerProcess, api: Any, version: int, body: dict[str, Any]) -> dict[str, Any]:
    w = Wire(b.bootstrap)
    try:
        return w.request(api, version, body)
    finally:
        w.close()


def _heartbeat(b: BrokerProcess, group: str, gen: int, member: str, instance: str | None = None) -> int:
    body = {"group_id": group, "generation_id": gen, "member_id": member, "group_instance_id": instance}
    return int(_call(b, HEARTBEAT, 3, body)["error_code"])


def _sync(b: BrokerProcess, group: str, gen: int, member: str, assignments: list[dict[str, Any]]) -> dict[str, Any]:
    body = {"group_id": group, "generation_id": gen, "member_id": member, "assignments": assignments}
    return _call(b, SYNC_GROUP, 3, body)


def _describe(b: BrokerProcess, group: str) -> dict[str, Any]:
    return _call(b, DESCRIBE_GROUPS, 3, {"groups": [group]})["groups"][0]  # type: ignore[no-any-return]


def _commit(
    b: BrokerProcess, group: str, gen: int, member: str, offset: int, metadata: str = "", version: int = 7
) -> int:
    body = {
        "group_id": group,
        "generation_id": gen,
        "member_id": member,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": 3,
                        "committed_metadata": metadata,
                    }
                ],
            }
        ],
    }
    return int(_call(b, OFFSET_COMMIT, version, body)["topics"][0]["partitions"][0]["error_code"])


def _fetch(b: BrokerProcess, group: str, version: int = 5) -> dict[str, Any]:
    r = _call(b, OFFSET_FETCH, version, {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}]})
    return r["topics"][0]["partitions"][0]  # type: ignore[no-any-return]


def test_one_member_lifecycle_and_its_errors(coordinator: BrokerProcess) -> None:
    b, g = coordinator, "lifecycle"
    bad = _call(
        b,
        JOIN_GROUP,
        5,
        {
            "group_id": g,
            "session_timeout_ms": 10,
            "rebalance_timeout_ms": 1000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
    )
    assert bad["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
    joined = _joined(b, g)
    me, gen = joined["member_id"], joined["generation_id"]
    assert joined["error_code"] == ErrorCode.NONE and gen >= 1 and joined["leader"] == me
    assert [m["member_id"] for m in joined["members"]] == [me]
    assert _join(b, g, protocol_type="connect")["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert _join(b, g, "nobody")["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID

    assert _sync(b, g, gen + 1, me, [])["error_code"] == ErrorCode.ILLEGAL_GENERATION
    synced = _sync(b, g, gen, me, [{"member_id": me, "assignment": b"all-of-it"}])
    assert synced == {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "assignment": b"all-of-it"}
    assert _heartbeat(b, g, gen, me) == ErrorCode.NONE
    assert _heartbeat(b, g, gen, "nobody") == ErrorCode.UNKNOWN_MEMBER_ID
    assert _heartbeat(b, g, gen - 1, me) == ErrorCode.ILLEGAL_GENERATION

    assert _commit(b, g, gen - 1, me, 5) == ErrorCode.ILLEGAL_GENERATION
    assert _commit(b, g, gen, "nobody", 5) == ErrorCode.UNKNOWN_MEMBER_ID
    assert _commit(b, g, gen, me, 5, "x" * 5000) == ErrorCode.OFFSET_METADATA_TOO_LARGE
    assert _commit(b, g, gen, me, 42, "note") == ErrorCode.NONE
    fetched = _fetch(b, g)
    assert (fetched["committed_offset"], fetched["committed_leader_epoch"], fetched["metadata"]) == (42, 3, "note")
    assert _fetch(b, "no-such-group")["committed_offset"] == -1
    deadline = time.monotonic() + 10  # the gauges are read when /metrics is scraped
    while b.metric("kafka_coordinator_group_groupmetadatamanager_numoffsets") != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert b.metric("kafka_coordinator_group_groupmetadatamanager_numgroups") == 1
    assert b.metric("kafka_coordinator_group_groupcoordinator_rebalances_total") >= 1

    d = _describe(b, g)
    assert (d["error_code"], d["group_state"], d["protocol_type"], d["protocol_data"]) == (
        0,
        "Stable",
        "consumer",
        "range",
    )
    assert [(m["member_id"], m["member_assignment"]) for m in d["members"]] == [(me, b"all-of-it")]
    assert _describe(b, "no-such-group")["group_state"] == "Dead"
    assert _call(b, DELETE_GROUPS, 1, {"groups_names": [g]})["results"][0]["error_code"] == ErrorCode.NON_EMPTY_GROUP

    assert _call(b, LEAVE_GROUP, 2, {"group_id": g, "member_id": me})["error_code"] == ErrorCode.NONE
    assert _describe(b, g)["group_state"] == "Empty"
    assert _call(b, DELETE_GROUPS, 1, {"groups_names": [g]})["results"][0]["error_code"] == ErrorCode.NONE
    assert _fetch(b, g)["committed_offset"] == -1
    assert _call(b, DELETE_GROUPS, 1, {"groups_names": [g]})["results"][0]["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND


def test_rebalance_timeout_removes_a_member_that_does_not_rejoin_then_session_expiry(
    coordinator: BrokerProcess,
) -> None:
    b, g = coordinator, "timeouts"
    first = _joined(b, g)
    a, gen1 = first["member_id"], first["generation_id"]
    assert _sync(b, g, gen1, a, [{"member_id": a, "assignment": b"p0"}])["error_code"] == ErrorCode.NONE
    with ThreadPoolExecutor(1) as pool:
        pending = _join(b, g)["member_id"]  # MEMBER_ID_REQUIRED's id for the second member
        second: Future[dict[str, Any]] = pool.submit(_join, b, g, pending)
        # the first member is told to rejoin, and does not: after its rebalance timeout (3 s) it is
        # removed and the second member's join completes alone
        deadline = time.monotonic() + 10
        while _heartbeat(b, g, gen1, a) != ErrorCode.REBALANCE_IN_PROGRESS:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        joined = second.result(30)
    assert joined["error_code"] == ErrorCode.NONE and joined["generation_id"] == gen1 + 1
    assert [m["member_id"] for m in joined["members"]] == [pending] and joined["leader"] == pending
    assert _heartbeat(b, g, gen1, a) == ErrorCode.UNKNOWN_MEMBER_ID
    # no heartbeat from the second member either: it expires after its session timeout
    deadline = time.monotonic() + 15
    while _describe(b, g)["group_state"] != "Empty":
        assert time.monotonic() < deadline, "the member did not expire"
        time.sleep(0.1)
    assert _heartbeat(b, g, gen1 + 1, pending) == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_static_member_rejoining_fences_its_old_member_id(coordinator: BrokerProcess) -> None:
    b, g = coordinator, "static"
    old = _join(b, g, instance="host-1")
    assert old["error_code"] == ErrorCode.NONE  # v5 with group.instance.id: no MEMBER_ID_REQUIRED step
    new = _join(b, g, instance="host-1")
    assert new["error_code"] == ErrorCode.NONE and new["member_id"] != old["member_id"]
    assert _heartbeat(b, g, new["generation_id"], old["member_id"], "host-1") == ErrorCode.FENCED_INSTANCE_ID
    assert _heartbeat(b, g, new["generation_id"], old["member_id"]) == ErrorCode.UNKNOWN_MEMBER_ID
    assert _heartbeat(b, g, new["generation_id"], new["member_id"], "host-1") == ErrorCode.NONE


SUB = [{"name": "range", "metadata": b"topics"}]  # the same subscription before and after a restart


def test_a_static_member_restarting_in_a_stable_group_gets_its_assignment_back_without_a_rebalance(
    coordinator: BrokerProcess,
) -> None:
    b, g = coordinator, "static-restart"
    first = _join(b, g, instance="a", protocols=SUB)
    with ThreadPoolExecutor(2) as pool:  # "b" joins; "a" rejoins the rebalance that starts
        jb = pool.submit(_join, b, g, instance="b", protocols=SUB)
        deadline = time.monotonic() + 10
        while _describe(b, g)["group_state"] != "PreparingRebalance":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        ja = pool.submit(_join, b, g, first["member_id"], instance="a", protocols=SUB)
        a, bm = ja.result(30), jb.result(30)
    gen = a["generation_id"]
    assert a["error_code"] == bm["error_code"] == ErrorCode.NONE and bm["generation_id"] == gen
    leader = a if a["leader"] == a["member_id"] else bm
    follower = bm if leader is a else a
    assignments = [
        {"member_id": a["member_id"], "assignment": b"p0"},
        {"member_id": bm["member_id"], "assignment": b"p1"},
    ]
    with ThreadPoolExecutor(2) as pool:
        fl = pool.submit(_sync, b, g, gen, leader["member_id"], assignments)
        ff = pool.submit(_sync, b, g, gen, follower["member_id"], [])
        assert fl.result(30)["error_code"] == ff.result(30)["error_code"] == ErrorCode.NONE

    # "a" restarts: it joins again with its group.instance.id and no member id
    again = _join(b, g, instance="a", protocols=SUB)
    assert again["error_code"] == ErrorCode.NONE and again["member_id"] not in (a["member_id"], bm["member_id"])
    assert again["generation_id"] == gen  # no new generation: nobody else rebalances
    assert again["leader"] == (again["member_id"] if leader is a else bm["member_id"])
    synced = _sync(b, g, gen, again["member_id"], [])
    assert (synced["error_code"], synced["assignment"]) == (ErrorCode.NONE, b"p0")
    assert _heartbeat(b, g, gen, bm["member_id"], "b") == ErrorCode.NONE  # not REBALANCE_IN_PROGRESS
    assert _heartbeat(b, g, gen, a["member_id"], "a") == ErrorCode.FENCED_INSTANCE_ID
    assert _commit(b, g, gen, a["member_id"], 5) == ErrorCode.UNKNOWN_MEMBER_ID  # its old id is gone
    d = _describe(b, g)
    assert d["group_state"] == "Stable"
    assert {m["member_id"]: m["member_assignment"] for m in d["members"]} == {
        again["member_id"]: b"p0",
        bm["member_id"]: b"p1",
    }
    # a static member is removed by its session timeout: "b" stops heartbeating, "a" goes on
    deadline = time.monotonic() + 30
    while (hb := _heartbeat(b, g, gen, again["member_id"], "a")) == ErrorCode.NONE:
        assert time.monotonic() < deadline, "the silent static member was not removed"
        time.sleep(0.3)
    assert hb == ErrorCode.REBALANCE_IN_PROGRESS
    assert [m["member_id"] for m in _join(b, g, again["member_id"], instance="a", protocols=SUB)["members"]] == [
        again["member_id"]
    ]


def test_offset_commit_v0_is_stored_in_zookeeper(coordinator: BrokerProcess, zk_connect: str) -> None:
    b = coordinator
    assert _commit(b, "zk-group", -1, "", 17, version=0) == ErrorCode.NONE
    assert _fetch(b, "zk-group", version=0)["committed_offset"] == 17
    zk = KazooClient(hosts=zk_connect)
    zk.start(10)
    try:
        assert zk.get("/consumers/zk-group/offsets/t/0")[0] == b"17"
    finally:
        zk.stop()
        zk.close()
    assert _fetch(b, "zk-group", version=1)["committed_offset"] == -1  # v1+ is the coordinator's, apart


def _commit_many(b: BrokerProcess, version: int, group: str, tps: list[tuple[str, int]], **kw: Any) -> dict[Any, int]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, p in tps:
        topics.setdefault(topic, []).append(
            {"partition_index": p, "committed_offset": 7, "committed_leader_epoch": -1, "committed_metadata": ""}
        )
    body = {
        "group_id": group,
        "generation_id": kw.get("generation", -1),
        "member_id": kw.get("member", ""),
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }
    r = _call(b, OFFSET_COMMIT, version, body)
    return {(t["name"], p["partition_index"]): p["error_code"] for t in r["topics"] for p in t["partitions"]}


def _fetch_many(b: BrokerProcess, version: int, group: str, tps: list[tuple[str, int]]) -> dict[Any, tuple[int, int]]:
    topics: dict[str, list[int]] = {}
    for topic, p in tps:
        topics.setdefault(topic, []).append(p)
    body = {"group_id": group, "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}
    r = _call(b, OFFSET_FETCH, version, body)
    return {
        (t["name"], p["partition_index"]): (p["committed_offset"], p["error_code"])
        for t in r["topics"]
        for p in t["partitions"]
    }


UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize(
    ("api", "version", "expected"),
    [
        # Kafka 2.3 KafkaApis: OffsetCommit answers a partition its metadata lacks
        # UNKNOWN_TOPIC_OR_PARTITION (any version) and commits the others
        ("commit", 0, {("t", 0): 0, ("t", 9): UNKNOWN, ("nope", 0): UNKNOWN}),
        ("commit", 2, {("t", 0): 0, ("t", 9): UNKNOWN, ("nope", 0): UNKNOWN}),
        ("commit", 7, {("t", 0): 0, ("t", 9): UNKNOWN, ("nope", 0): UNKNOWN}),
        # OffsetFetch v1+ does not look at the metadata: no offset is -1 and NONE
        ("fetch", 1, {("t", 0): (7, 0), ("t", 1): (-1, 0), ("nope", 0): (-1, 0)}),
        ("fetch", 5, {("t", 0): (7, 0), ("t", 1): (-1, 0), ("nope", 0): (-1, 0)}),
        # v0 (ZooKeeper) answers OffsetFetchResponse.UNKNOWN_PARTITION for unknown partitions
        # and for partitions without an offset
        ("fetch", 0, {("t", 0): (7, 0), ("t", 1): (-1, UNKNOWN), ("nope", 0): (-1, UNKNOWN)}),
    ],
)
def test_offset_commit_and_fetch_answer_unknown_topics_and_partitions_as_kafka(
    coordinator: BrokerProcess, api: str, version: int, expected: dict[Any, Any]
) -> None:
    b, g = coordinator, f"unknown-{api}-{version}"
    if api == "commit":
        assert _commit_many(b, version, g, list(expected)) == expected
    else:
        assert _commit_many(b, 0 if version == 0 else 7, g, [("t", 0)]) == {("t", 0): 0}
        assert _fetch_many(b, version, g, list(expected)) == expected


def test_offset_commit_checks_the_member_only_for_partitions_that_exist(coordinator: BrokerProcess) -> None:
    b, g = coordinator, "member-errors"
    joined = _joined(b, g)
    me, gen = joined["member_id"], joined["generation_id"]
    assert _sync(b, g, gen, me, [])["error_code"] == ErrorCode.NONE
    assert _commit_many(b, 7, g, [("nope", 0)], generation=gen + 5, member="nobody") == {("nope", 0): UNKNOWN}
    cases = [
        ({"generation": gen, "member": "nobody"}, ErrorCode.UNKNOWN_MEMBER_ID),
        ({"generation": gen + 1, "member": me}, ErrorCode.ILLEGAL_GENERATION),
        ({"generation": -1, "member": ""}, ErrorCode.UNKNOWN_MEMBER_ID),  # a simple commit to a group with members
        ({"generation": gen, "member": me}, ErrorCode.NONE),
    ]
    for kw, code in cases:
        assert _commit_many(b, 7, g, [("t", 0), ("nope", 0)], **kw) == {("t", 0): code, ("nope", 0): UNKNOWN}, kw


def test_groups_and_offsets_are_loaded_back_after_kill9(coordinator: BrokerProcess) -> None:
    b, g = coordinator, "durable"
    joined = _joined(b, g)
    me, gen = joined["member_id"], joined["generation_id"]
    assert _sync(b, g, gen, me, [{"member_id": me, "assignment": b"a"}])["error_code"] == ErrorCode.NONE
    assert _commit(b, g, gen, me, 1234, "kept") == ErrorCode.NONE
    assert _commit(b, "simple", -1, "", 99) == ErrorCode.NONE  # a group without members
    b.kill9()
    b.start()
    deadline = time.monotonic() + 30
    while (f := _fetch(b, g, version=1))["error_code"] != ErrorCode.NONE:  # loading or not yet elected
        assert time.monotonic() < deadline, f
        time.sleep(0.1)
    assert (f["committed_offset"], f["metadata"]) == (1234, "kept")
    assert _fetch(b, "simple")["committed_offset"] == 99
    d = _describe(b, g)
    assert d["group_state"] == "Stable" and [m["member_id"] for m in d["members"]] == [me]
    assert _heartbeat(b, g, gen, me) == ErrorCode.NONE  # the member carries on with the reloaded group


def test_clients_cannot_produce_to_the_offsets_topic(coordinator: BrokerProcess) -> None:
    batch = encode_batch([RecordInput(b"k", b"forged", 0)])
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topics": [{"name": OFFSETS_TOPIC, "partitions": [{"partition_index": 0, "records": batch}]}],
    }
    answer = _call(coordinator, PRODUCE, 7, body)["responses"][0]["partitions"][0]
    assert answer["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
