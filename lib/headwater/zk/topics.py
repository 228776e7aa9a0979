"""A topic's znodes: its replica assignment and each partition's state, and the topic-name rule.

``/brokers/topics/<t>`` (Kafka 2.3's TopicZNode, version 1)::

    {"version":1,"partitions":{"0":[1,2,3],"1":[2,3,1]}}

``/brokers/topics/<t>/partitions/<p>/state`` (TopicPartitionStateZNode, version 1), written by the
controller (elections) and by the partition's leader (ISR changes), always conditionally on the
znode's version::

    {"controller_epoch":3,"leader":1,"version":1,"leader_epoch":7,"isr":[1,2,3]}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from headwater.zk.json import ZnodeFormatError, json_object, to_json

ASSIGNMENT_VERSION = 1
STATE_VERSION = 1

#: Kafka's topic-name rule (Topic.validate): legal characters and the longest name.
TOPIC_NAME_CHARS = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249


def topic_name_error(name: str) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's wording), or None when it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
    if not TOPIC_NAME_CHARS.match(name):
        return f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    return None


@dataclass
class TopicAssignment:
    #: partition -> replica broker ids, the first the preferred leader
    partitions: dict[int, list[int]]
    #: other fields of the document (e.g. Kafka 2.4+'s adding/removing replicas), kept on rewrite
    extra: dict[str, object] = field(default_factory=dict)

    def encode(self) -> bytes:
        parts = {str(p): list(r) for p, r in sorted(self.partitions.items())}
        return to_json({**self.extra, "version": ASSIGNMENT_VERSION, "partitions": parts})


def decode_assignment(topic: str, data: bytes | None) -> TopicAssignment:
    doc = json_object(data, f"/brokers/topics/{topic}")
    raw = doc.get("partitions")
    if not isinstance(raw, dict):
        raise ZnodeFormatError(f"/brokers/topics/{topic}: no partitions object")
    try:
        partitions = {int(p): [int(b) for b in r] for p, r in raw.items()}
    except (TypeError, ValueError):
        raise ZnodeFormatError(f"/brokers/topics/{topic}: malformed partitions {raw!r}") from None
    extra = {k: v for k, v in doc.items() if k not in ("version", "partitions")}
    return TopicAssignment(partitions, extra)


@dataclass(frozen=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int

    def encode(self) -> bytes:
        return to_json(
            {
                "controller_epoch": self.controller_epoch,
                "leader": self.leader,
                "version": STATE_VERSION,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
            }
        )


def decode_partition_state(topic: str, partition: int, data: bytes | None) -> PartitionState:
    doc = json_object(data, f"/brokers/topics/{topic}/partitions/{partition}/state")
    try:
        return PartitionState(
            int(doc["leader"]),
            int(doc["leader_epoch"]),
            tuple(int(b) for b in doc["isr"]),
            int(doc["controller_epoch"]),
        )
    except (KeyError, TypeError, ValueError):
        raise ZnodeFormatError(f"/brokers/topics/{topic}/partitions/{partition}/state: malformed {doc!r}") from None
