"""Every Kafka API we speak, declared once with per-field version ranges.

The advertised snapshot is Kafka 2.3's (see docs/protocol.md for the reasoning); each module
declares one API. ``API_BY_KEY`` is what the broker advertises in ApiVersions. ``ALL_APIS`` is
in key order; LeaderAndIsr, StopReplica, UpdateMetadata and ControlledShutdown are the
inter-broker (controller) APIs of the ZooKeeper era; OffsetCommit through DeleteGroups are the group
coordinator's; AddPartitionsToTxn through TxnOffsetCommit are the transaction coordinator's
(KIP-98, WriteTxnMarkers inter-broker); SaslHandshake and SaslAuthenticate are answered by the connection's SASL gate
before a client is authenticated.
"""

from headwater.protocol.apis.add_offsets_to_txn import ADD_OFFSETS_TO_TXN
from headwater.protocol.apis.add_partitions_to_txn import ADD_PARTITIONS_TO_TXN
from headwater.protocol.apis.alter_configs import ALTER_CONFIGS
from headwater.protocol.apis.api_versions import API_VERSIONS
from headwater.protocol.apis.controlled_shutdown import CONTROLLED_SHUTDOWN
from headwater.protocol.apis.create_acls import CREATE_ACLS
from headwater.protocol.apis.create_partitions import CREATE_PARTITIONS
from headwater.protocol.apis.create_topics import CREATE_TOPICS
from headwater.protocol.apis.delete_acls import DELETE_ACLS
from headwater.protocol.apis.delete_groups import DELETE_GROUPS
from headwater.protocol.apis.delete_records import DELETE_RECORDS
from headwater.protocol.apis.delete_topics import DELETE_TOPICS
from headwater.protocol.apis.describe_acls import DESCRIBE_ACLS
from headwater.protocol.apis.describe_configs import DESCRIBE_CONFIGS
from headwater.protocol.apis.describe_groups import DESCRIBE_GROUPS
from headwater.protocol.apis.describe_log_dirs import DESCRIBE_LOG_DIRS
from headwater.protocol.apis.elect_leaders import ELECT_LEADERS
from headwater.protocol.apis.end_txn import END_TXN
from headwater.protocol.apis.fetch import FETCH
from headwater.protocol.apis.find_coordinator import FIND_COORDINATOR
from headwater.protocol.apis.heartbeat import HEARTBEAT
from headwater.protocol.apis.incremental_alter_configs import INCREMENTAL_ALTER_CONFIGS
from headwater.protocol.apis.init_producer_id import INIT_PRODUCER_ID
from headwater.protocol.apis.join_group import JOIN_GROUP
from headwater.protocol.apis.leader_and_isr import LEADER_AND_ISR
from headwater.protocol.apis.leave_group import LEAVE_GROUP
from headwater.protocol.apis.list_groups import LIST_GROUPS
from headwater.protocol.apis.list_offsets import LIST_OFFSETS
from headwater.protocol.apis.metadata import METADATA
from headwater.protocol.apis.offset_commit import OFFSET_COMMIT
from headwater.protocol.apis.offset_fetch import OFFSET_FETCH
from headwater.protocol.apis.offset_for_leader_epoch import OFFSET_FOR_LEADER_EPOCH
from headwater.protocol.apis.produce import PRODUCE
from headwater.protocol.apis.sasl_authenticate import SASL_AUTHENTICATE
from headwater.protocol.apis.sasl_handshake import SASL_HANDSHAKE
from headwater.protocol.apis.stop_replica import STOP_REPLICA
from headwater.protocol.apis.sync_group import SYNC_GROUP
from headwater.protocol.apis.txn_offset_commit import TXN_OFFSET_COMMIT
from headwater.protocol.apis.update_metadata import UPDATE_METADATA
from headwater.protocol.apis.write_txn_markers import WRITE_TXN_MARKERS
from headwater.protocol.schema import Api

ALL_APIS: tuple[Api, ...] = (
    PRODUCE,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    LEADER_AND_ISR,
    STOP_REPLICA,
    UPDATE_METADATA,
    CONTROLLED_SHUTDOWN,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    FIND_COORDINATOR,
    JOIN_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    SYNC_GROUP,
    DESCRIBE_GROUPS,
    LIST_GROUPS,
    SASL_HANDSHAKE,
    API_VERSIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DELETE_RECORDS,
    INIT_PRODUCER_ID,
    OFFSET_FOR_LEADER_EPOCH,
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    WRITE_TXN_MARKERS,
    TXN_OFFSET_COMMIT,
    DESCRIBE_ACLS,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    DESCRIBE_LOG_DIRS,
    SASL_AUTHENTICATE,
    CREATE_PARTITIONS,
    DELETE_GROUPS,
    ELECT_LEADERS,
    INCREMENTAL_ALTER_CONFIGS,
)

API_BY_KEY: dict[int, Api] = {api.key: api for api in ALL_APIS}

__all__ = [
    "ADD_OFFSETS_TO_TXN",
    "ADD_PARTITIONS_TO_TXN",
    "ALL_APIS",
    "ALTER_CONFIGS",
    "API_BY_KEY",
    "API_VERSIONS",
    "CONTROLLED_SHUTDOWN",
    "CREATE_ACLS",
    "CREATE_PARTITIONS",
    "CREATE_TOPICS",
    "DELETE_ACLS",
    "DELETE_GROUPS",
    "DELETE_RECORDS",
    "DELETE_TOPICS",
    "DESCRIBE_ACLS",
    "DESCRIBE_CONFIGS",
    "DESCRIBE_GROUPS",
    "DESCRIBE_LOG_DIRS",
    "ELECT_LEADERS",
    "END_TXN",
    "FETCH",
    "FIND_COORDINATOR",
    "HEARTBEAT",
    "INCREMENTAL_ALTER_CONFIGS",
    "INIT_PRODUCER_ID",
    "JOIN_GROUP",
    "LEADER_AND_ISR",
    "LEAVE_GROUP",
    "LIST_GROUPS",
    "LIST_OFFSETS",
    "METADATA",
    "OFFSET_COMMIT",
    "OFFSET_FETCH",
    "OFFSET_FOR_LEADER_EPOCH",
    "PRODUCE",
    "SASL_AUTHENTICATE",
    "SASL_HANDSHAKE",
    "STOP_REPLICA",
    "SYNC_GROUP",
    "TXN_OFFSET_COMMIT",
    "UPDATE_METADATA",
    "WRITE_TXN_MARKERS",
]
