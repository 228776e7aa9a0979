"""DescribeLogDirs (key 35), v0-1 as in Kafka 2.3 (KIP-113).

Request:
  v0    topics[topic, partitions[]] (nullable: null asks for every partition).
  v1    same as v0.
Response:
  v0    throttle_time_ms, results[error_code, log_dir, topics[name, partitions[partition_index,
        partition_size, offset_lag, is_future_key]]].
  v1    same as v0 (throttled responses are sent before throttling).

One result per log dir of the broker answering (a request goes to each broker of interest);
``partition_size`` is the bytes of the replica's segments, ``offset_lag`` how far the replica's
log end offset is behind the high watermark (0 on the leader), ``is_future_key`` true only for a
replica being moved between log dirs (never here: one log dir per replica, no AlterReplicaLogDirs).
"""

from headwater.protocol.schema import (
    BOOLEAN,
    INT16,
    INT32,
    INT64,
    STRING,
    Api,
    Array,
    Field,
    Struct,
)

DESCRIBE_LOG_DIRS = Api(
    key=35,
    name="DescribeLogDirs",
    min_version=0,
    max_version=1,
    request=Struct(
        Field(
            "topics",
            Array(
                Struct(Field("topic", STRING), Field("partitions", Array(INT32))),
                nullable_since=0,
            ),
        ),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field(
            "results",
            Array(
                Struct(
                    Field("error_code", INT16),
                    Field("log_dir", STRING),
                    Field(
                        "topics",
                        Array(
                            Struct(
                                Field("name", STRING),
                                Field(
                                    "partitions",
                                    Array(
                                        Struct(
                                            Field("partition_index", INT32),
                                            Field("partition_size", INT64),
                                            Field("offset_lag", INT64),
                                            Field("is_future_key", BOOLEAN),
                                        )
                                    ),
                                ),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
)
