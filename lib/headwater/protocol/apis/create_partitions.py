"""CreatePartitions (key 37), v0-1 as in Kafka 2.3.

Request:
  v0    topics[name, count, assignments[broker_ids[]] (nullable)], timeout_ms, validate_only.
  v1    same as v0.
Response:
  v0    throttle_time_ms, results[name, error_code, error_message].
  v1    same as v0 (throttled responses are sent before throttling).

``count`` is the new total number of partitions; ``assignments`` (null for the broker to choose)
has one entry per new partition, in partition order.
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

CREATE_PARTITIONS = Api(
    key=37,
    name="CreatePartitions",
    min_version=0,
    max_version=1,
    request=Struct(
        Field(
            "topics",
            Array(
                Struct(
                    Field("name", STRING),
                    Field("count", INT32),
                    Field(
                        "assignments",
                        Array(Struct(Field("broker_ids", Array(INT32))), nullable_since=0),
                    ),
                )
            ),
        ),
        Field("timeout_ms", INT32, default=60000),
        Field("validate_only", BOOLEAN),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field(
            "results",
            Array(
                Struct(
                    Field("name", STRING),
                    Field("error_code", INT16),
                    Field("error_message", NULLABLE_STRING),
                )
            ),
        ),
    ),
)
