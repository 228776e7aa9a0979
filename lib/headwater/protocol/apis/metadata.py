"""Metadata (key 3), v0-8 as in Kafka 2.3.

Request:
  v0    topics[name]; an empty array means all topics.
  v1    topics becomes nullable: null means all topics, empty means none.
  v2-3  same as v1.
  v4    adds allow_auto_topic_creation.
  v5-7  same as v4.
  v8    adds include_cluster_authorized_operations, include_topic_authorized_operations.
Response:
  v0    brokers[node_id, host, port], topics[error_code, name,
        partitions[error_code, partition_index, leader_id, replica_nodes[], isr_nodes[]]].
  v1    adds broker rack, controller_id, topic is_internal.
  v2    adds cluster_id.
  v3    adds throttle_time_ms.
  v4    same as v3.
  v5    adds offline_replicas per partition.
  v6    same as v5 (throttled responses are sent before throttling).
  v7    adds leader_epoch per partition.
  v8    adds topic_authorized_operations and cluster_authorized_operations.
"""

from headwater.protocol.schema import (
    BOOLEAN,
    INT16,
    INT32,
    NULLABLE_STRING,
    STRING,
    Api,
    Array,
    Field,
    Struct,
)

#: "Authorized operations not requested" in the v8+ bitfields.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

METADATA = Api(
    key=3,
    name="Metadata",
    min_version=0,
    max_version=8,
    request=Struct(
        Field("topics", Array(Struct(Field("name", STRING)), nullable_since=1)),
        Field("allow_auto_topic_creation", BOOLEAN, since=4, default=True),
        Field("include_cluster_authorized_operations", BOOLEAN, since=8),
        Field("include_topic_authorized_operations", BOOLEAN, since=8),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, since=3),
        Field(
            "brokers",
            Array(
                Struct(
                    Field("node_id", INT32),
                    Field("host", STRING),
                    Field("port", INT32),
                    Field("rack", NULLABLE_STRING, since=1),
                )
            ),
        ),
        Field("cluster_id", NULLABLE_STRING, since=2),
        Field("controller_id", INT32, since=1, default=-1),
        Field(
            "topics",
            Array(
                Struct(
                    Field("error_code", INT16),
                    Field("name", STRING),
                    Field("is_internal", BOOLEAN, since=1),
                    Field(
                        "partitions",
                        Array(
                            Struct(
                                Field("error_code", INT16),
                                Field("partition_index", INT32),
                                Field("leader_id", INT32),
                                Field("leader_epoch", INT32, since=7, default=-1),
                                Field("replica_nodes", Array(INT32)),
                                Field("isr_nodes", Array(INT32)),
                                Field("offline_replicas", Array(INT32), since=5),
                            )
                        ),
                    ),
                    Field("topic_authorized_operations", INT32, since=8, default=AUTHORIZED_OPERATIONS_OMITTED),
                )
            ),
        ),
        Field("cluster_authorized_operations", INT32, since=8, default=AUTHORIZED_OPERATIONS_OMITTED),
    ),
)
