"""ListOffsets (key 2), v0-5 as in Kafka 2.3.

Request:
  v0    replica_id, topics[name, partitions[partition_index, timestamp, max_num_offsets]].
  v1    drops max_num_offsets: a single offset per partition.
  v2    adds isolation_level.
  v3    same as v2.
  v4    adds current_leader_epoch per partition (fencing).
  v5    same as v4.
Response:
  v0    topics[name, partitions[partition_index, error_code, old_style_offsets[]]].
  v1    old_style_offsets replaced by a single timestamp and offset.
  v2    adds throttle_time_ms.
  v3    same as v2 (throttled responses are sent before throttling).
  v4    adds leader_epoch per partition.
  v5    same as v4; may return OFFSET_NOT_AVAILABLE.

timestamp -1 asks for the latest offset, -2 for the earliest.
"""

from headwater.protocol.schema import INT8, INT16, INT32, INT64, STRING, Api, Array, Field, Struct

LIST_OFFSETS = Api(
    key=2,
    name="ListOffsets",
    min_version=0,
    max_version=5,
    request=Struct(
        Field("replica_id", INT32, default=-1),
        Field("isolation_level", INT8, since=2),
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
                                Field("current_leader_epoch", INT32, since=4, default=-1),
                                Field("timestamp", INT64),
                                Field("max_num_offsets", INT32, until=0, default=1),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, since=2),
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
                                Field("error_code", INT16),
                                Field("old_style_offsets", Array(INT64), until=0),
                                Field("timestamp", INT64, since=1, default=-1),
                                Field("offset", INT64, since=1, default=-1),
                                Field("leader_epoch", INT32, since=4, default=-1),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
)
