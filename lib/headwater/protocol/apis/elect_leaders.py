"""ElectLeaders (key 43), v0-1 as in Kafka 2.4 (KIP-183 ElectPreferredLeaders v0, KIP-460 v1).

Request:
  v0    topic_partitions[topic, partitions[]] (nullable: null means every partition), timeout_ms.
  v1    election_type (int8, 0 = preferred, 1 = unclean) first.
Response:
  v0    throttle_time_ms, replica_election_results[topic, partition_result[partition_id,
        error_code, error_message]].
  v1    a top-level error_code after throttle_time_ms (e.g. CLUSTER_AUTHORIZATION_FAILED, NOT_CONTROLLER).

Kafka 2.3 named key 43 ElectPreferredLeaders (v0 only); v0 is the same bytes. Sent to the controller.
"""

from headwater.protocol.schema import (
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

PREFERRED, UNCLEAN = 0, 1

ELECT_LEADERS = Api(
    key=43,
    name="ElectLeaders",
    min_version=0,
    max_version=1,
    request=Struct(
        Field("election_type", INT8, since=1),
        Field(
            "topic_partitions",
            Array(Struct(Field("topic", STRING), Field("partitions", Array(INT32))), nullable_since=0),
        ),
        Field("timeout_ms", INT32, default=60000),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16, since=1),
        Field(
            "replica_election_results",
            Array(
                Struct(
                    Field("topic", STRING),
                    Field(
                        "partition_result",
                        Array(
                            Struct(
                                Field("partition_id", INT32),
                                Field("error_code", INT16),
                                Field("error_message", NULLABLE_STRING),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
)
