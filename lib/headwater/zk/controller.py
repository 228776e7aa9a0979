"""``/controller`` (ephemeral, Kafka 2.3's ControllerZNode, version 1) and ``/controller_epoch``.

/controller        {"version":1,"brokerid":1,"timestamp":"1574000000000"}
/controller_epoch  3            (a decimal integer, no JSON object)
"""

from __future__ import annotations

from headwater.zk.json import ZnodeFormatError, from_json, json_object, to_json

VERSION = 1


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return to_json({"version": VERSION, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(data: bytes | None) -> int:
    """The controller's broker id. Kafka 0.8 wrote a bare integer; both are read."""
    value = from_json(data)
    if isinstance(value, int):
        return value
    doc = json_object(data, "/controller")
    try:
        return int(doc["brokerid"])
    except (KeyError, TypeError, ValueError):
        raise ZnodeFormatError(f"/controller: no brokerid in {doc!r}") from None


def encode_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_epoch(data: bytes | None) -> int:
    try:
        return int(bytes(data or b"").decode())
    except ValueError:
        raise ZnodeFormatError(f"/controller_epoch: not an integer: {data!r}") from None
