"""EndTxn (key 26), v0-1: commit or abort the producer's transaction (txn/coordinator.py).

Answered once PrepareCommit / PrepareAbort is in ``__transaction_state`` (the decision); the
markers and the Complete* record follow. NONE for a retry of a completed EndTxn;
CONCURRENT_TRANSACTIONS while the markers of the same decision are being written;
INVALID_TXN_STATE for no open transaction or the other decision; NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, INVALID_PRODUCER_ID_MAPPING,
INVALID_PRODUCER_EPOCH (fenced).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.handlers import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    code = await broker.txns.end_txn(
        request["transactional_id"], request["producer_id"], request["producer_epoch"], request["committed"]
    )
    return {"throttle_time_ms": 0, "error_code": code}
