"""Building the controller's requests (LeaderAndIsr v2, UpdateMetadata v5, StopReplica v1).

Bodies use the newest field layout (grouped by topic); the codec encodes them at the version
the channel sends, which is our maximum for each API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.broker.controller.election import LeaderAndIsr
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.controller.controller import Controller

TP = tuple[str, int]


def _group(tps: list[TP]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in tps:
        out.setdefault(t, []).append(p)
    return out


def _partition_state(topic: str, partition: int, s: LeaderAndIsr) -> Message:
    """The fields LeaderAndIsr and UpdateMetadata partition states share."""
    return {
        "topic_name": topic,
        "partition_index": partition,
        "controller_epoch": s.controller_epoch,
        "leader": s.leader,
        "leader_epoch": s.leader_epoch,
        "isr": list(s.isr),
    }


def leader_and_isr(c: Controller, broker_id: int, tps: list[TP], is_new: bool) -> Message:
    topic_states = []
    leaders: set[int] = set()
    for topic, parts in _group(tps).items():
        states = []
        for p in parts:
            s = c.ctx.states[(topic, p)]
            leaders.add(s.leader)
            states.append(
                {
                    **_partition_state(topic, p, s),
                    "partition_epoch": s.zk_version,
                    "replicas": c.ctx.replicas((topic, p)),
                    "is_new": is_new,
                }
            )
        topic_states.append({"topic_name": topic, "partition_states": states})
    live_leaders = []
    for b in sorted(leaders):
        info = c.ctx.brokers.get(b)
        endpoint = info.endpoints.get(c.broker.config.inter_broker_listener_name) if info else None
        if endpoint is not None:
            live_leaders.append({"broker_id": b, "host_name": endpoint[0], "port": endpoint[1]})
    return {
        "controller_id": c.broker_id,
        "controller_epoch": c.epoch,
        "broker_epoch": c.ctx.broker_epochs.get(broker_id, -1),
        "topic_states": topic_states,
        "live_leaders": live_leaders,
    }


def update_metadata(c: Controller, states: dict[TP, LeaderAndIsr], replicas: dict[TP, list[int]]) -> Message:
    """UpdateMetadata of ``states``, each topic named whole: every partition of a topic the
    controller knows goes with it, its current state from the controller's context (issue 38,
    item 6). A broker's metadata cache holds what UpdateMetadata told it, partition by partition;
    a request naming only the partitions that changed (the leaders a failover elected) reaching a
    cache that does not hold the rest of the topic yet -- a broker that just started or
    re-registered, before its full UpdateMetadata -- left a topic with some of its partitions
    there, and Metadata answered that topic short: a client then maps keys to fewer partitions."""
    states = dict(states)
    replicas = dict(replicas)
    for topic in {t for t, _ in states}:
        for p in c.ctx.assignments.get(topic, {}):
            tp = (topic, p)
            if tp not in states and tp in c.ctx.states:
                states[tp] = c.ctx.states[tp]
                replicas[tp] = c.ctx.replicas(tp)
    live = c.ctx.live | c.ctx.shutting_down
    topic_states = []
    grouped: dict[str, list[int]] = _group(sorted(states))
    for topic, parts in grouped.items():
        ps = []
        for p in parts:
            s = states[(topic, p)]
            reps = replicas.get((topic, p), [])
            ps.append(
                {
                    **_partition_state(topic, p, s),
                    "zk_version": s.zk_version,
                    "replicas": reps,
                    "offline_replicas": [
                        r for r in reps if r not in live or (topic, p) in c.ctx.offline_replicas.get(r, ())
                    ],
                }
            )
        topic_states.append({"topic_name": topic, "partition_states": ps})
    brokers = []
    protocols = c.broker.config.listener_security_protocol_map
    for b in sorted(c.ctx.brokers.values(), key=lambda b: b.broker_id):
        brokers.append(
            {
                "id": b.broker_id,
                "endpoints": [
                    {
                        "port": port,
                        "host": host,
                        "listener": name,
                        "security_protocol": _protocol_id(protocols.get(name, "PLAINTEXT")),
                    }
                    for name, (host, port) in b.endpoints.items()
                ],
                "rack": b.rack,
            }
        )
    return {
        "controller_id": c.broker_id,
        "controller_epoch": c.epoch,
        "broker_epoch": -1,
        "topic_states": topic_states,
        "live_brokers": brokers,
    }


def stop_replica(c: Controller, tps: list[TP], delete: bool) -> Message:
    return {
        "controller_id": c.broker_id,
        "controller_epoch": c.epoch,
        "broker_epoch": -1,
        "delete_partitions": delete,
        "topics": [{"name": t, "partition_indexes": ps} for t, ps in _group(tps).items()],
    }


_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def _protocol_id(name: str) -> int:
    return _PROTOCOL_IDS.get(name.upper(), 0)
