"""Cluster-wide znodes.

``/cluster/id`` (Kafka 2.3's ClusterIdZNode; note the version is a *string*)::

    {"version":"1","id":"Ex2d7dF1QzS2a9w1fxE3yA"}

``/latest_producer_id_block`` (ProducerIdBlockZNode, version 1; block bounds are strings)::

    {"version":1,"broker":1,"block_start":"0","block_end":"999"}
"""

from __future__ import annotations

from dataclasses import dataclass

from headwater.zk.json import ZnodeFormatError, json_object, to_json

PRODUCER_ID_BLOCK_VERSION = 1


def encode_cluster_id(cluster_id: str) -> bytes:
    return to_json({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    doc = json_object(data, "/cluster/id")
    if not isinstance(doc.get("id"), str):
        raise ZnodeFormatError(f"/cluster/id: no id in {doc!r}")
    return str(doc["id"])


@dataclass(frozen=True)
class ProducerIdBlock:
    broker: int
    start: int
    end: int  # inclusive

    def encode(self) -> bytes:
        return to_json(
            {
                "version": PRODUCER_ID_BLOCK_VERSION,
                "broker": self.broker,
                "block_start": str(self.start),
                "block_end": str(self.end),
            }
        )


def decode_producer_id_block(data: bytes | None) -> ProducerIdBlock:
    doc = json_object(data, "/latest_producer_id_block")
    try:
        return ProducerIdBlock(int(doc["broker"]), int(doc["block_start"]), int(doc["block_end"]))
    except (KeyError, TypeError, ValueError):
        raise ZnodeFormatError(f"/latest_producer_id_block: malformed {doc!r}") from None
