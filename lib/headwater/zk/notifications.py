"""Sequential notifications brokers leave for the controller.

``/isr_change_notification/isr_change_<seq>`` (IsrChangeNotificationSequenceZNode, version 1): a
leader changed the ISR of these partitions; the controller sends UpdateMetadata and deletes it::

    {"version":1,"partitions":[{"topic":"t","partition":0}]}

``/log_dir_event_notification/log_dir_event_<seq>`` (LogDirEventNotificationSequenceZNode, version
1): a log directory of this broker failed (event 1, LogDirFailure); the controller asks the broker
which replicas are offline and moves their leadership::

    {"version":1,"broker":1,"event":1}
"""

from __future__ import annotations

from headwater.zk.admin import TopicPartition, decode_partition_list
from headwater.zk.json import ZnodeFormatError, json_object, to_json

VERSION = 1
LOG_DIR_FAILURE = 1


def encode_isr_change(partitions: list[TopicPartition]) -> bytes:
    return to_json({"version": VERSION, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def decode_isr_change(data: bytes | None) -> list[TopicPartition]:
    return decode_partition_list("/isr_change_notification entry", data)


def encode_log_dir_event(broker_id: int) -> bytes:
    return to_json({"version": VERSION, "broker": broker_id, "event": LOG_DIR_FAILURE})


def decode_log_dir_event(data: bytes | None) -> int:
    """The broker whose log directory failed."""
    doc = json_object(data, "/log_dir_event_notification entry")
    try:
        return int(doc["broker"])
    except (KeyError, TypeError, ValueError):
        raise ZnodeFormatError(f"/log_dir_event_notification entry: no broker in {doc!r}") from None
