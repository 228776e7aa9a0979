"""CreateTopics (key 19), v0-5: v0-3 as in Kafka 2.3, v4-5 from Kafka 2.4 (KIP-464, KIP-525).

Request:
  v0    topics[name, num_partitions, replication_factor, assignments[partition_index,
        broker_ids[]], configs[name, value]], timeout_ms.
  v1    adds validate_only.
  v2-3  same as v1.
  v4    same as v3; num_partitions and replication_factor may be -1 without assignments: the
        broker's num.partitions / default.replication.factor (KIP-464).
  v5    same fields, flexible version (KIP-482: compact encodings, tagged fields).
Response:
  v0    topics[name, error_code].
  v1    adds error_message per topic.
  v2    adds throttle_time_ms.
  v3    same as v2 (throttled responses are sent before throttling).
  v4    same as v3.
  v5    flexible; adds per topic num_partitions, replication_factor and configs[name, value,
        read_only, config_source, is_sensitive] of the created topic (KIP-525); the tagged field
        topic_config_error_code is never sent (configs are always readable here).

num_partitions and replication_factor are -1 when assignments are given.
"""

from headwater.protocol.schema import (
    BOOLEAN,
    INT8,
    INT16,
    INT32,
    NULLABLE_STRING,
    STRING,
    Api,
    Array,
    Field,
    Struct,
)

CREATE_TOPICS = Api(
    key=19,
    name="CreateTopics",
    min_version=0,
    max_version=5,
    flexible_since=5,
    request=Struct(
        Field(
            "topics",
            Array(
                Struct(
                    Field("name", STRING),
                    Field("num_partitions", INT32),
                    Field("replication_factor", INT16),
                    Field(
                        "assignments",
                        Array(
                            Struct(
                                Field("partition_index", INT32),
                                Field("broker_ids", Array(INT32)),
                            )
                        ),
                    ),
                    Field(
                        "configs",
                        Array(
                            Struct(
                                Field("name", STRING),
                                Field("value", NULLABLE_STRING),
                            )
                        ),
                    ),
                )
            ),
        ),
        Field("timeout_ms", INT32, default=60000),
        Field("validate_only", BOOLEAN, since=1),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, since=2),
        Field(
            "topics",
            Array(
                Struct(
                    Field("name", STRING),
                    Field("error_code", INT16),
                    Field("error_message", NULLABLE_STRING, since=1),
                    Field("num_partitions", INT32, since=5, default=-1),
                    Field("replication_factor", INT16, since=5, default=-1),
                    Field(
                        "configs",
                        Array(
                            Struct(
                                Field("name", STRING),
                                Field("value", NULLABLE_STRING),
                                Field("read_only", BOOLEAN),
                                Field("config_source", INT8, default=-1),
                                Field("is_sensitive", BOOLEAN),
                            ),
                            nullable_since=5,
                        ),
                        since=5,
                    ),
                )
            ),
        ),
    ),
)
