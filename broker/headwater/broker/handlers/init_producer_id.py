"""InitProducerId (key 22), v0-1: a producer id for an idempotent producer.

- transactional_id null: a new producer id from the cluster-wide blocks in ZooKeeper (see
  producer_ids.py) with epoch 0. Every call gets a new id, as in Kafka.
- transactional_id set: answered by the transaction coordinator (txn/coordinator.py): the
  id's producer id with its epoch bumped (a new producer id at epoch 0 for a new id), which fences
  the previous producer and aborts its open transaction (CONCURRENT_TRANSACTIONS until that abort
  is complete: the client retries); NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS,
  INVALID_TRANSACTION_TIMEOUT (above ``transaction.max.timeout.ms``), INVALID_REQUEST (an
  empty id).
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
        code, pid, epoch = await broker.txns.init_producer_id(
            request["transactional_id"], request["transaction_timeout_ms"]
        )
        out.update(error_code=code, producer_id=pid, producer_epoch=epoch)
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
