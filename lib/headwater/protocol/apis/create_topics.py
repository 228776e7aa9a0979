"""CreateTopics (key 19), v0-4: v0-3 as in Kafka 2.3, v4 from Kafka 2.4 (KIP-464).

Request:
  v0    topics[name, num_partitions, replication_factor, assignments[partition_index,
        broker_ids[]], configs[name, value]], timeout_ms.
  v1    adds validate_only.
  v2-3  same as v1.
  v4    same as v3; num_partitions and replication_factor may be -1 without assignments: the
        broker's num.partitions / default.replication.factor (KIP-464).
Response:
  v0    topics[name, error_code].
  v1    adds error_message per topic.
  v2    adds throttle_time_ms.
  v3    same as v2 (throttled responses are sent before throttling).
  v4    same as v3.

num_partitions and replication_factor are -1 when assignments are given.
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

CREATE_TOPICS = Api(
    key=19,
    name="CreateTopics",
    min_version=0,
    max_version=4,
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
                )
            ),
        ),
    ),
)
