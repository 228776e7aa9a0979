"""OffsetCommit (key 8), v0-7 as in Kafka 2.3.

Request:
  v0    group_id, topics[name, partitions[partition_index, committed_offset, committed_metadata]];
        stored in ZooKeeper (``/consumers/<group>/offsets/<topic>/<partition>``), as Kafka does.
  v1    adds generation_id, member_id and a per-partition commit_timestamp; from v1 offsets go
        to the group coordinator (``__consumer_offsets``).
  v2-4  drop commit_timestamp, add retention_time_ms (-1: the broker's offsets.retention.minutes).
  v5    drops retention_time_ms.
  v6    adds committed_leader_epoch per partition.
  v7    adds group_instance_id.
Response:  topics[name, partitions[partition_index, error_code]]; v3 adds throttle_time_ms.
"""

from headwater.protocol.schema import INT16, INT32, INT64, NULLABLE_STRING, STRING, Api, Array, Field, Struct

OFFSET_COMMIT = Api(
    key=8,
    name="OffsetCommit",
    min_version=0,
    max_version=7,
    request=Struct(
        Field("group_id", STRING),
        Field("generation_id", INT32, since=1, default=-1),
        Field("member_id", STRING, since=1),
        Field("group_instance_id", NULLABLE_STRING, since=7),
        Field("retention_time_ms", INT64, since=2, until=4, default=-1),
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
                                Field("committed_offset", INT64),
                                Field("committed_leader_epoch", INT32, since=6, default=-1),
                                Field("commit_timestamp", INT64, since=1, until=1, default=-1),
                                Field("committed_metadata", NULLABLE_STRING),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, since=3),
        Field(
            "topics",
            Array(
                Struct(
                    Field("name", STRING),
                    Field("partitions", Array(Struct(Field("partition_index", INT32), Field("error_code", INT16)))),
                )
            ),
        ),
    ),
)
