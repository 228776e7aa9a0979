"""IncrementalAlterConfigs (key 44), v0.

- TOPIC resources (type 2): each named key is SET (0), DELETEd back to its default (1), or, for
  list configs (cleanup.policy), APPENDed to (2) or SUBTRACTed from (3); keys not named keep their
  override. Everything else is AlterConfigs' (handlers/alter_configs.py): the complete result is
  validated before anything is stored (INVALID_CONFIG), then written to ``/config/topics/<t>``
  with a change notification and applied live on every broker.
- A key named twice in one resource, a null value for SET, an unknown operation: INVALID_REQUEST;
  APPEND / SUBTRACT on a non-list config: INVALID_CONFIG.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.broker import config_admin
from headwater.broker.handlers.alter_configs import alter
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    def apply(current: dict[str, str], resource: Message) -> dict[str, str]:
        ops = [(c["name"], c["config_operation"], c["value"]) for c in resource["configs"]]
        return config_admin.incremental(current, ops)

    return await alter(broker, ctx, request, apply, "IncrementalAlterConfigs")
