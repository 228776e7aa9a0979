"""ApiVersions (key 18), v0-2.

Answers with every API in :data:`headwater.protocol.apis.ALL_APIS` and the versions we
implement (a Kafka 2.3.0 snapshot). A request above v2 is answered by
:func:`api_versions_fallback`: a v0-format body with UNSUPPORTED_VERSION (35) and our ranges,
under a v0 response header, so clients retry at a version we speak (KIP-511).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.apis import ALL_APIS, API_VERSIONS
from headwater.protocol.errors import ErrorCode
from headwater.protocol.frames import encode_response
from headwater.protocol.primitives import FileRegion
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


def _api_keys() -> list[Message]:
    return [
        {"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
        for api in sorted(ALL_APIS, key=lambda a: a.key)
    ]


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    return {"error_code": ErrorCode.NONE, "api_keys": _api_keys(), "throttle_time_ms": 0}


def api_versions_fallback(correlation_id: int) -> list[bytes | FileRegion]:
    body = {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": _api_keys()}
    return encode_response(correlation_id, API_VERSIONS, 0, body)
