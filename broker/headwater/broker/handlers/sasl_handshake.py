"""SaslHandshake (key 17), v0-1, once a connection is past the SASL gate.

Before authentication the gate (broker/sasl.py) answers SaslHandshake. A handshake that reaches
this handler came on a listener without SASL or after the client authenticated: Kafka answers
ILLEGAL_SASL_STATE with no mechanisms, and so do we.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
