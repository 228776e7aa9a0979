"""The Metadata handler keeps each topic's answer, encoded once per version, until the metadata
cache changes it (handlers/metadata.py, metadata_cache.py): a kept answer must never go stale.

The controller's own UpdateMetadata bodies (controller/requests.py) go through the wire codec into
the UpdateMetadata handler and a real MetadataCache, one change at a time: a new leader, a shrunk
ISR, a broker's death and return, a moved endpoint, an offline replica, added partitions, a deleted
and a created topic. After each, every Metadata version's all-topics answer, with the kept answers,
is compared field by field with the answer built afresh from the same cache.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from headwater.broker.controller import requests as build
from headwater.broker.controller.election import LeaderAndIsr
from headwater.broker.handlers import metadata as metadata_handler
from headwater.broker.handlers import update_metadata as update_metadata_handler
from headwater.broker.metadata_cache import BrokerInfo
from headwater.protocol.apis import METADATA, UPDATE_METADATA
from headwater.protocol.errors import ErrorCode
from headwater.protocol.frames import decode_response, encode_response
from tests.unit.test_metadata_completeness import PARTITIONS, _broker, _call, _controller


def _update(c: Any, broker: Any, tps: list[tuple[str, int]]) -> None:
    body = build.update_metadata(c, {tp: c.ctx.states[tp] for tp in tps}, {tp: c.ctx.replicas(tp) for tp in tps})
    assert _call(update_metadata_handler, broker, UPDATE_METADATA, 5, body)["error_code"] == ErrorCode.NONE


def _answers(broker: Any) -> dict[int, Any]:
    """Every version's all-topics answer as a client decodes it off the wire."""
    out = {}
    for version in range(9):
        request: dict[str, Any] = {"topics": [] if version == 0 else None, "allow_auto_topic_creation": False}
        response = _call(metadata_handler, broker, METADATA, version, request)
        frame = b"".join(bytes(p) for p in encode_response(7, METADATA, version, response))  # type: ignore[arg-type]
        out[version] = decode_response(METADATA, version, memoryview(frame)[4:])[1]
    return out


def _check(broker: Any, step: str) -> dict[int, Any]:
    kept = _answers(broker)
    assert broker.cache.answers, f"{step}: nothing kept"
    saved = dict(broker.cache.answers)
    broker.cache.answers.clear()
    fresh = _answers(broker)
    broker.cache.answers.clear()
    broker.cache.answers.update(saved)
    for version in range(9):
        assert kept[version] == fresh[version], f"{step}: v{version} answered from a stale kept answer"
    return fresh[7]


def test_kept_answers_follow_every_change_of_the_cache() -> None:
    c = _controller(dead=0)  # brokers 1-3 alive, topics a and b of PARTITIONS partitions, RF 3
    broker = _broker()
    _update(c, broker, sorted(c.ctx.states))
    _check(broker, "full state")

    # a new leader and a shrunk ISR for a few partitions of a
    for p in (0, 1, 2):
        s = c.ctx.states[("a", p)]
        c.ctx.states[("a", p)] = s.new_leader(c.ctx.replicas(("a", p))[1], s.isr[1:], c.epoch)
    _update(c, broker, [("a", 0), ("a", 1), ("a", 2)])
    v7 = _check(broker, "new leaders")
    a = {p["partition_index"]: p for t in v7["topics"] if t["name"] == "a" for p in t["partitions"]}
    assert a[0]["leader_id"] == c.ctx.replicas(("a", 0))[1] and len(a[0]["isr_nodes"]) == 2

    # an ISR change alone (same leader and epoch), for one partition of b
    s = c.ctx.states[("b", 5)]
    c.ctx.states[("b", 5)] = replace(s, isr=s.isr[:1], zk_version=s.zk_version + 1)
    _update(c, broker, [("b", 5)])
    _check(broker, "shrunk ISR")

    # broker 3 dies: UpdateMetadata naming no partition, only the live brokers
    del c.ctx.brokers[3]
    _update(c, broker, [])
    v7 = _check(broker, "broker 3 dead")
    led_by_3 = [
        p for t in v7["topics"] for p in t["partitions"] if c.ctx.states[(t["name"], p["partition_index"])].leader == 3
    ]
    assert led_by_3 and all(p["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE for p in led_by_3)

    # broker 3 returns on another port
    c.ctx.brokers[3] = BrokerInfo(3, {"PLAINTEXT": ("127.0.0.1", 19093)}, "rack-3")
    _update(c, broker, [])
    v7 = _check(broker, "broker 3 back, moved")
    assert {b["node_id"]: b["port"] for b in v7["brokers"]}[3] == 19093

    # an offline replica (a failed log dir on broker 2) for one partition
    c.ctx.offline_replicas[2] = {("b", 7)}
    _update(c, broker, [("b", 7)])
    v7 = _check(broker, "offline replica")
    b7 = next(p for t in v7["topics"] if t["name"] == "b" for p in t["partitions"] if p["partition_index"] == 7)
    assert b7["offline_replicas"] == [2]

    # two partitions added to a
    for p in (PARTITIONS, PARTITIONS + 1):
        c.ctx.assignments["a"][p] = [1, 2, 3]
        c.ctx.states[("a", p)] = LeaderAndIsr(1, 0, (1, 2, 3), c.epoch, 0)
    _update(c, broker, [("a", PARTITIONS), ("a", PARTITIONS + 1)])
    v7 = _check(broker, "added partitions")
    assert len(next(t for t in v7["topics"] if t["name"] == "a")["partitions"]) == PARTITIONS + 2

    # topic b deleted (LeaderDuringDelete for each of its partitions), topic c created
    for p in range(PARTITIONS):
        c.ctx.states[("b", p)] = replace(c.ctx.states[("b", p)], leader=-2)
    _update(c, broker, [("b", p) for p in range(PARTITIONS)])
    for p in range(PARTITIONS):
        del c.ctx.states[("b", p)]
    del c.ctx.assignments["b"]
    c.ctx.assignments["c"] = {0: [2, 3, 1]}
    c.ctx.states[("c", 0)] = LeaderAndIsr(2, 0, (2, 3, 1), c.epoch, 0)
    _update(c, broker, [("c", 0)])
    v7 = _check(broker, "b deleted, c created")
    assert [t["name"] for t in v7["topics"]] == ["a", "c"]
