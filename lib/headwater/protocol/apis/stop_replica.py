"""StopReplica (key 5), v0-1 as in Kafka 2.3: controller → broker, stop (and maybe delete) replicas.

Request:
  v0    controller_id, controller_epoch, delete_partitions,
        ungrouped_partitions[topic_name, partition_index].
  v1    adds broker_epoch; partitions are grouped by topic: topics[name, partition_indexes[]]
        replaces ungrouped_partitions.
Response:
  v0    error_code, partition_errors[topic_name, partition_index, error_code].
  v1    same as v0.

Field names are the newest Kafka JSON's (Kafka 4.0 removed the API with ZooKeeper); Kafka 2.3
called them partitions_v0 and, in the response, partitions.
"""

from headwater.protocol.schema import BOOLEAN, INT16, INT32, INT64, STRING, Api, Array, Field, Struct

STOP_REPLICA = Api(
    key=5,
    name="StopReplica",
    min_version=0,
    max_version=1,
    request=Struct(
        Field("controller_id", INT32),
        Field("controller_epoch", INT32),
        Field("broker_epoch", INT64, since=1, default=-1),
        Field("delete_partitions", BOOLEAN),
        Field(
            "ungrouped_partitions",
            Array(
                Struct(
                    Field("topic_name", STRING),
                    Field("partition_index", INT32),
                )
            ),
            until=0,
        ),
        Field(
            "topics",
            Array(
                Struct(
                    Field("name", STRING),
                    Field("partition_indexes", Array(INT32)),
                )
            ),
            since=1,
        ),
    ),
    response=Struct(
        Field("error_code", INT16),
        Field(
            "partition_errors",
            Array(
                Struct(
                    Field("topic_name", STRING),
                    Field("partition_index", INT32),
                    Field("error_code", INT16),
                )
            ),
        ),
    ),
)
