"""DeleteTopics (key 20), v0-3.

- Marks each topic under /admin/delete_topics; the controller has the replicas delete their
  logs (StopReplica) and removes the topic's znodes. Unknown topics get UNKNOWN_TOPIC_OR_PARTITION; with
  ``delete.topic.enable=false`` every topic gets TOPIC_DELETION_DISABLED.
- Waits (up to timeout_ms) until the topic is gone from this broker's metadata; a topic still
  present at the deadline gets REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from headwater.broker import topic_admin
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

log = logging.getLogger(__name__)


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    results: list[Message] = []
    deleted: list[str] = []
    for name in dict.fromkeys(request["topic_names"]):
        try:
            await topic_admin.delete_topic(broker.zk, broker.cache, name, broker.config.delete_topic_enable)
        except KafkaError as e:
            results.append({"name": name, "error_code": e.code})
            continue
        log.info("deleted topic %s (client %r)", name, ctx.client_id)
        deleted.append(name)
        results.append({"name": name, "error_code": ErrorCode.NONE})
    deadline = time.monotonic() + max(0, request["timeout_ms"]) / 1000.0
    while any(n in broker.cache.topics for n in deleted) and time.monotonic() < deadline:
        await broker.wait_for_metadata(deadline - time.monotonic())
    for r in results:
        if r["name"] in broker.cache.topics and r["error_code"] == ErrorCode.NONE:
            r["error_code"] = ErrorCode.REQUEST_TIMED_OUT
    return {"throttle_time_ms": 0, "responses": results}
