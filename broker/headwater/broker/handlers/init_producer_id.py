"""InitProducerId (key 22), v0-1: a producer id for an idempotent producer.

- transactional_id null: a new producer id from the cluster-wide blocks in ZooKeeper (see
  producer_ids.py) with epoch 0. Every call gets a new id, as in Kafka.
- transactional_id set: TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53). Headwater has no
  transaction coordinator (FindCoordinator for transactions, AddPartitionsToTxn, EndTxn ... are
  not advertised); 53 is what Kafka answers a transactional id the producer may not use, a
  non-retriable error, so a transactional client fails at once instead of retrying forever
  (a coordinator error would make it retry until its timeout).
- ZooKeeper unavailable: COORDINATOR_NOT_AVAILABLE (15, retriable), as Kafka answers while its
  producer id manager cannot claim a block.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

log = logging.getLogger(__name__)


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    out: Message = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": -1, "producer_epoch": -1}
    if request["transactional_id"] is not None:
        log.info("InitProducerId from %s refused: transactions are not supported", ctx.peer)
        out["error_code"] = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return out
    try:
        out["producer_id"] = await broker.producer_ids.next_id()
    except KafkaError as e:
        log.warning("InitProducerId: %s", e.message)
        out["error_code"] = e.code
        return out
    except Exception as e:  # ZooKeeper connection loss, session expiry
        log.warning("InitProducerId: cannot claim a producer id block: %s", e)
        out["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return out
    out["producer_epoch"] = 0
    return out
