"""SaslAuthenticate (key 36), v0-1, once a connection is past the SASL gate.

Tokens of an exchange in progress are answered by the gate (broker/sasl.py). One that reaches
this handler came on a listener without SASL or after authentication: ILLEGAL_SASL_STATE, as
Kafka answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    return {
        "error_code": ErrorCode.ILLEGAL_SASL_STATE,
        "error_message": "SaslAuthenticate request received after successful authentication or on a listener without SASL",
        "auth_bytes": b"",
        "session_lifetime_ms": 0,
    }
