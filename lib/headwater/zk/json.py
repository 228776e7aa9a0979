"""The JSON every Kafka znode holds: compact, UTF-8; a znode that is empty or not JSON reads as None."""

from __future__ import annotations

import json as _json
from typing import Any


class ZnodeFormatError(ValueError):
    """A znode's data is not the document its path should hold."""


def to_json(value: Any) -> bytes:
    return _json.dumps(value, separators=(",", ":")).encode()


def from_json(data: bytes | None) -> Any:
    """The decoded document, or None for an empty znode or one that is not JSON."""
    if not data:
        return None
    try:
        return _json.loads(data)
    except ValueError:
        return None


def json_object(data: bytes | None, what: str) -> dict[str, Any]:
    """The document as a JSON object, or ZnodeFormatError naming ``what`` it should have been."""
    value = from_json(data)
    if not isinstance(value, dict):
        raise ZnodeFormatError(f"{what}: not a JSON object: {bytes(data or b'')[:200]!r}")
    return value
