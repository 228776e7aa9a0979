"""The client's exceptions.

Broker-reported errors are :class:`~headwater.protocol.errors.KafkaError` (with Kafka's code);
transport problems are :class:`KafkaConnectionError`; waiting too long is :class:`KafkaTimeoutError`.
"""

from __future__ import annotations

from headwater.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "ErrorCode",
    "KafkaAuthenticationError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "OffsetOutOfRangeError",
    "UnknownTopicError",
]


class KafkaConnectionError(ConnectionError):
    """A broker could not be reached, or its connection broke or spoke nonsense."""


class KafkaAuthenticationError(KafkaConnectionError):
    """The broker refused this client's TLS or SASL credentials (SASL_AUTHENTICATION_FAILED)."""


class KafkaTimeoutError(TimeoutError):
    """An operation (connect, request, metadata wait, delivery) did not finish in time."""


class UnknownTopicError(KafkaError):
    """The topic (or the partition) does not exist on the cluster."""

    def __init__(self, topic: str, partition: int | None = None) -> None:
        what = f"topic {topic!r}" if partition is None else f"partition {partition} of topic {topic!r}"
        super().__init__(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{what} does not exist")
        self.topic = topic
        self.partition = partition


class OffsetOutOfRangeError(KafkaError):
    """A fetch asked for an offset outside [log start offset, log end offset]."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        super().__init__(
            ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is out of range for partition {topic}-{partition}"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
