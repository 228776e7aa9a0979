"""ControlledShutdown (key 7), v1-2 of Kafka 2.3's v0-2: broker → controller, before it stops.

Request:
  v0    NOT OFFERED: v0 requests carry a non-standard request header without client_id (request
        header v0), which our frame decoder does not read. Apache Kafka 4.0 dropped v0 as well
        (KIP-896). Kafka's own brokers send v1+ since 0.9.
  v1    broker_id (the same body as v0).
  v2    adds broker_epoch.
Response:
  v1-2  error_code, remaining_partitions[topic_name, partition_index] (the same as v0).
"""

from headwater.protocol.schema import INT16, INT32, INT64, STRING, Api, Array, Field, Struct

CONTROLLED_SHUTDOWN = Api(
    key=7,
    name="ControlledShutdown",
    min_version=1,
    max_version=2,
    request=Struct(
        Field("broker_id", INT32),
        Field("broker_epoch", INT64, since=2, default=-1),
    ),
    response=Struct(
        Field("error_code", INT16),
        Field(
            "remaining_partitions",
            Array(
                Struct(
                    Field("topic_name", STRING),
                    Field("partition_index", INT32),
                )
            ),
        ),
    ),
)
