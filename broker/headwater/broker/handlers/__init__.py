"""Request handling: one module per Kafka API, each opening with its versions and behaviour.

A handler is ``async def handle(broker, ctx, request) -> response | None``: it gets the
decoded request (a dict shaped by the API's schema) and returns the response dict, or None
when no response is sent (Produce with acks=0). Handlers answer with Kafka error codes;
they never let an exception reach the wire.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from headwater.broker.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    api_versions,
    controlled_shutdown,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leader_and_isr,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    stop_replica,
    sync_group,
    txn_offset_commit,
    update_metadata,
    write_txn_markers,
)
from headwater.broker.handlers.api_versions import api_versions_fallback
from headwater.broker.request import RequestContext
from headwater.protocol.apis import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    ALTER_CONFIGS,
    API_VERSIONS,
    CONTROLLED_SHUTDOWN,
    CREATE_ACLS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_ACLS,
    DELETE_GROUPS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_ACLS,
    DESCRIBE_CONFIGS,
    DESCRIBE_GROUPS,
    DESCRIBE_LOG_DIRS,
    ELECT_LEADERS,
    END_TXN,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    INCREMENTAL_ALTER_CONFIGS,
    INIT_PRODUCER_ID,
    JOIN_GROUP,
    LEADER_AND_ISR,
    LEAVE_GROUP,
    LIST_GROUPS,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    STOP_REPLICA,
    SYNC_GROUP,
    TXN_OFFSET_COMMIT,
    UPDATE_METADATA,
    WRITE_TXN_MARKERS,
)
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.services import HandlerServices


Handler = Callable[["HandlerServices", RequestContext, Message], Awaitable[Any]]

HANDLERS: dict[int, Handler] = {
    PRODUCE.key: produce.handle,
    FETCH.key: fetch.handle,
    LIST_OFFSETS.key: list_offsets.handle,
    METADATA.key: metadata.handle,
    API_VERSIONS.key: api_versions.handle,
    CREATE_TOPICS.key: create_topics.handle,
    DELETE_TOPICS.key: delete_topics.handle,
    DESCRIBE_CONFIGS.key: describe_configs.handle,
    LEADER_AND_ISR.key: leader_and_isr.handle,
    STOP_REPLICA.key: stop_replica.handle,
    UPDATE_METADATA.key: update_metadata.handle,
    CONTROLLED_SHUTDOWN.key: controlled_shutdown.handle,
    OFFSET_FOR_LEADER_EPOCH.key: offset_for_leader_epoch.handle,
    DELETE_GROUPS.key: delete_groups.handle,
    DESCRIBE_GROUPS.key: describe_groups.handle,
    FIND_COORDINATOR.key: find_coordinator.handle,
    HEARTBEAT.key: heartbeat.handle,
    JOIN_GROUP.key: join_group.handle,
    LEAVE_GROUP.key: leave_group.handle,
    LIST_GROUPS.key: list_groups.handle,
    OFFSET_COMMIT.key: offset_commit.handle,
    OFFSET_FETCH.key: offset_fetch.handle,
    SYNC_GROUP.key: sync_group.handle,
    INIT_PRODUCER_ID.key: init_producer_id.handle,
    SASL_HANDSHAKE.key: sasl_handshake.handle,
    SASL_AUTHENTICATE.key: sasl_authenticate.handle,
    DESCRIBE_ACLS.key: describe_acls.handle,
    CREATE_ACLS.key: create_acls.handle,
    DELETE_ACLS.key: delete_acls.handle,
    CREATE_PARTITIONS.key: create_partitions.handle,
    ALTER_CONFIGS.key: alter_configs.handle,
    INCREMENTAL_ALTER_CONFIGS.key: incremental_alter_configs.handle,
    DELETE_RECORDS.key: delete_records.handle,
    DESCRIBE_LOG_DIRS.key: describe_log_dirs.handle,
    ELECT_LEADERS.key: elect_leaders.handle,
    ADD_PARTITIONS_TO_TXN.key: add_partitions_to_txn.handle,
    ADD_OFFSETS_TO_TXN.key: add_offsets_to_txn.handle,
    END_TXN.key: end_txn.handle,
    WRITE_TXN_MARKERS.key: write_txn_markers.handle,
    TXN_OFFSET_COMMIT.key: txn_offset_commit.handle,
}

__all__ = ["HANDLERS", "RequestContext", "api_versions_fallback"]
