"""AlterConfigs (key 33), v0-1.

- TOPIC resources (type 2): the configs given become the topic's complete set of overrides in
  ``/config/topics/<t>`` (keys left out return to the broker default, as in Kafka), with a change
  notification under ``/config/changes`` (config_admin). Every broker applies them live.
- Unknown keys and invalid values: INVALID_CONFIG, nothing stored (the whole resource is checked
  before anything is written). Unknown topic: UNKNOWN_TOPIC_OR_PARTITION. A null value drops the key.
- validate_only checks and writes nothing.
- BROKER resources (type 4): this broker's id (the client sends it to that broker; another id is
  INVALID_REQUEST) or ``""``, the cluster-wide default: the dynamic broker configs of
  ``/config/brokers/<id>`` or ``/config/brokers/<default>`` (dynamic_config.py), with a change
  notification; only Kafka 2.3's dynamic broker configs Headwater applies may be set, anything
  else or a bad value is INVALID_CONFIG with nothing stored. Applied live on every broker. With an
  authorizer: AlterConfigs on Cluster, else CLUSTER_AUTHORIZATION_FAILED.
- Other resource types: INVALID_REQUEST. A resource named twice: INVALID_REQUEST.
- Accepted by any broker (Kafka's AdminClient sends topic configs to any broker).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from headwater.broker import config_admin, dynamic_config
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

log = logging.getLogger(__name__)

TOPIC = 2
BROKER = 4

#: given the topic's current overrides and one resource of the request, its new overrides
NewOverrides = Callable[[dict[str, str], Message], dict[str, str]]


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    def replace(_current: dict[str, str], resource: Message) -> dict[str, str]:
        return {c["name"]: c["value"] for c in resource["configs"] if c["value"] is not None}

    return await alter(broker, ctx, request, replace, "AlterConfigs")


async def alter(
    broker: HandlerServices, ctx: RequestContext, request: Message, new_overrides: NewOverrides, api: str
) -> Message:
    """The body both AlterConfigs and IncrementalAlterConfigs answer with."""
    counts = Counter((r["resource_type"], r["resource_name"]) for r in request["resources"])
    responses: list[Message] = []
    for resource in request["resources"]:
        rtype, rname = resource["resource_type"], resource["resource_name"]
        try:
            if counts[(rtype, rname)] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate resource in request: {rname}")
            await _alter_one(broker, ctx, resource, new_overrides, bool(request["validate_only"]))
        except KafkaError as e:
            log.warning("%s of %s from %s refused: %s", api, rname, ctx.peer, e)
            responses.append(_response(rtype, rname, e.code, e.message))
            continue
        if not request["validate_only"]:
            what = "topic" if rtype == TOPIC else "broker"
            log.info("%s: %s %r configs changed (client %r)", api, what, rname, ctx.client_id)
        responses.append(_response(rtype, rname, ErrorCode.NONE, None))
    return {"throttle_time_ms": 0, "responses": responses}


async def _alter_one(
    broker: HandlerServices, ctx: RequestContext, resource: Message, new_overrides: NewOverrides, validate_only: bool
) -> None:
    rtype, rname = resource["resource_type"], resource["resource_name"]
    if rtype == BROKER:
        await _alter_broker(broker, resource, new_overrides, validate_only)
        return
    if rtype != TOPIC:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}")
    current, version = await config_admin.read_topic_overrides(broker.zk, rname)
    overrides = new_overrides(current, resource)
    await config_admin.write_topic_overrides(
        broker.zk, rname, overrides, version, broker.config.log_defaults, validate_only
    )


async def _alter_broker(
    broker: HandlerServices, resource: Message, new_overrides: NewOverrides, validate_only: bool
) -> None:
    rname = resource["resource_name"]
    if rname not in ("", str(broker.broker_id)):
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {broker.broker_id} or empty string, but received {rname}",
        )
    entity = dynamic_config.DEFAULT_ENTITY if rname == "" else rname
    current, version = await dynamic_config.read_overrides(broker.zk, entity)
    overrides = new_overrides(current, resource)
    static = broker.dynamic_config.static
    if validate_only:
        problem = dynamic_config.validate(overrides, static)
        if problem:
            raise KafkaError(ErrorCode.INVALID_CONFIG, problem)
        return
    await dynamic_config.write_overrides(broker.zk, entity, overrides, version, static)


def _response(rtype: int, rname: str, code: ErrorCode, message: str | None) -> Message:
    return {"error_code": code, "error_message": message, "resource_type": rtype, "resource_name": rname}
