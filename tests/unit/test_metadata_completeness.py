"""Every Metadata answer lists every partition of every topic it names (issue 38, item 6).

The scale test once saw the survivors of a controller's kill -9 answer 1,987 of 2,000 partitions.
A broker's metadata cache holds what UpdateMetadata told it, partition by partition, and the
controller sends, besides the full state a broker gets when it joins, UpdateMetadata naming only
the partitions that changed. One of those reaching a cache that does not hold the rest of their
topics -- the leaders a failover elected, sent to every registered broker right away, reaching one
that just started or re-registered before its full state -- left those topics with a few of their
partitions, and Metadata answered them short. A client then maps keys to fewer partitions.

Here the controller's request bodies (controller/requests.py) go through the wire codec into the
UpdateMetadata handler and a real MetadataCache, and the Metadata handler answers from it: no
process, no ZooKeeper, the same sequence every time.
"""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace
from typing import Any

from headwater.broker.config import config_from_props
from headwater.broker.controller import requests as build
from headwater.broker.controller.controller import ControllerContext
from headwater.broker.controller.election import LeaderAndIsr
from headwater.broker.handlers import RequestContext
from headwater.broker.handlers import metadata as metadata_handler
from headwater.broker.handlers import update_metadata as update_metadata_handler
from headwater.broker.metadata_cache import BrokerInfo, MetadataCache
from headwater.protocol.apis import METADATA, UPDATE_METADATA
from headwater.protocol.errors import ErrorCode
from headwater.protocol.frames import decode_request, encode_request

TOPICS = ("a", "b")
PARTITIONS = 20
_correlation = itertools.count(1)


def _controller(dead: int) -> Any:
    """The controller (broker 1) after broker ``dead`` died: topics a and b, RF 3 over brokers 1-3,
    every partition led by its first replica (broker ``dead`` leads a third of them)."""
    ctx = ControllerContext()
    for b in (1, 2, 3):
        if b != dead:
            ctx.brokers[b] = BrokerInfo(b, {"PLAINTEXT": ("127.0.0.1", 9090 + b)}, None)
    for t in TOPICS:
        ctx.assignments[t] = {p: [1 + (p + i) % 3 for i in range(3)] for p in range(PARTITIONS)}
        for p, replicas in ctx.assignments[t].items():
            ctx.states[(t, p)] = LeaderAndIsr(replicas[0], 0, tuple(replicas), 1, 0)
    config = config_from_props({"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"})
    return SimpleNamespace(ctx=ctx, broker_id=1, epoch=2, broker=SimpleNamespace(config=config))


def _broker() -> Any:
    """The few services the two handlers reach, around a real, empty MetadataCache."""
    return SimpleNamespace(
        broker_epoch=-1,
        cluster_id="c",
        cache=MetadataCache(None),  # type: ignore[arg-type]  # ZooKeeper only for config watches
        config=config_from_props({"broker.id": "2", "zookeeper.connect": "127.0.0.1:2181"}),
        replicas=SimpleNamespace(check_controller_epoch=lambda epoch: True, on_live_brokers_changed=lambda: None),
        metadata_changed=lambda: None,
    )


def _call(handler: Any, broker: Any, api: Any, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` through the wire codec (as the controller's channel and a client send it), then the handler."""
    frame = encode_request(api, version, next(_correlation), "test", body)
    header, _, request = decode_request(memoryview(frame)[4:])
    return asyncio.run(handler.handle(broker, RequestContext(header, "PLAINTEXT", "127.0.0.1:1"), request))  # type: ignore[no-any-return]


def _metadata(broker: Any) -> dict[str, dict[int, dict[str, Any]]]:
    response = _call(metadata_handler, broker, METADATA, 7, {"topics": None, "allow_auto_topic_creation": False})
    return {t["name"]: {p["partition_index"]: p for p in t["partitions"]} for t in response["topics"]}


def test_the_elected_leaders_reaching_a_cache_without_their_topics_list_whole_topics() -> None:
    c = _controller(dead=3)
    # what the controller sends every registered broker first after electing the dead broker's
    # partitions' new leaders (Controller._send_new_states), before any full UpdateMetadata
    elected = {tp: s for tp, s in c.ctx.states.items() if s.leader == 3}
    for tp, s in elected.items():
        c.ctx.states[tp] = s.new_leader(c.ctx.replicas(tp)[1], tuple(r for r in s.isr if r != 3), c.epoch)
    changed = {tp: c.ctx.states[tp] for tp in elected}
    body = build.update_metadata(c, changed, {tp: c.ctx.replicas(tp) for tp in changed})
    broker = _broker()  # a broker that has just (re)started: its cache holds nothing yet
    assert _call(update_metadata_handler, broker, UPDATE_METADATA, 5, body)["error_code"] == ErrorCode.NONE

    answer = _metadata(broker)
    assert sorted(answer) == list(TOPICS)
    for t in TOPICS:
        assert sorted(answer[t]) == list(range(PARTITIONS)), f"topic {t}: {len(answer[t])} of {PARTITIONS} partitions"
        for p, part in answer[t].items():
            state = c.ctx.states[(t, p)]
            assert (part["error_code"], part["leader_id"], part["isr_nodes"]) == (
                ErrorCode.NONE,
                state.leader,
                list(state.isr),
            )
            assert part["replica_nodes"] == c.ctx.replicas((t, p))
            assert part["offline_replicas"] == [3]  # broker 3 is dead


def test_a_partition_whose_leader_died_is_listed_leader_not_available() -> None:
    c = _controller(dead=3)
    broker = _broker()
    # the full state, still naming the dead broker 3 as leader of a third of the partitions (what a
    # broker answers between a broker's death and the election of new leaders)
    full = build.update_metadata(c, dict(c.ctx.states), {tp: c.ctx.replicas(tp) for tp in c.ctx.states})
    _call(update_metadata_handler, broker, UPDATE_METADATA, 5, full)
    answer = _metadata(broker)
    for t in TOPICS:
        assert sorted(answer[t]) == list(range(PARTITIONS))
        for p, part in answer[t].items():
            if c.ctx.states[(t, p)].leader == 3:
                assert (part["error_code"], part["leader_id"]) == (ErrorCode.LEADER_NOT_AVAILABLE, -1)
                assert part["replica_nodes"] == c.ctx.replicas((t, p))
            else:
                assert part["error_code"] == ErrorCode.NONE
