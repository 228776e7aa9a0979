"""The seeds' ZooKeeper consumer groups (Kafka 0.8's high-level consumer), under ``/consumers/<g>``:

    ids/<consumer id>          ephemeral  {"version":1,"subscription":{"<topic or regex>":<streams>},
                                           "pattern":"static"|"white_list"|"black_list",
                                           "timestamp":"<ms>"}
    owners/<topic>/<partition> ephemeral  the owning consumer thread id, UTF-8 text
    offsets/<topic>/<partition>           the next offset to consume, a decimal integer

(Kafka 0.8's ZookeeperConsumerConnector, kept by Kafka 2.3's OffsetCommit v0, kafka-consumer-groups
and the mirror.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headwater.zk.json import ZnodeFormatError, json_object, to_json

REGISTRATION_VERSION = 1
PATTERNS = ("static", "white_list", "black_list")


@dataclass(frozen=True)
class ConsumerRegistration:
    #: topic (static) or regex (white_list / black_list) -> number of streams
    subscription: dict[str, int] = field(default_factory=dict)
    pattern: str = "static"
    timestamp_ms: int = 0

    def encode(self) -> bytes:
        return to_json(
            {
                "version": REGISTRATION_VERSION,
                "subscription": dict(self.subscription),
                "pattern": self.pattern,
                "timestamp": str(self.timestamp_ms),
            }
        )


def decode_registration(path: str, data: bytes | None) -> ConsumerRegistration:
    doc = json_object(data, path)
    pattern = str(doc.get("pattern", "static"))
    if pattern not in PATTERNS:
        raise ZnodeFormatError(f"{path}: unknown pattern {pattern!r}")
    try:
        subscription = {str(k): int(v) for k, v in (doc.get("subscription") or {}).items()}
        ts = int(doc.get("timestamp") or 0)
    except (TypeError, ValueError, AttributeError):
        raise ZnodeFormatError(f"{path}: malformed registration {doc!r}") from None
    return ConsumerRegistration(subscription, pattern, ts)


def encode_offset(offset: int) -> bytes:
    return str(offset).encode()


def decode_offset(path: str, data: bytes | None) -> int:
    try:
        return int(bytes(data or b"").decode().strip())
    except ValueError:
        raise ZnodeFormatError(f"{path}: not an offset: {data!r}") from None


def encode_owner(thread_id: str) -> bytes:
    return thread_id.encode()


def decode_owner(data: bytes | None) -> str:
    return bytes(data or b"").decode()
