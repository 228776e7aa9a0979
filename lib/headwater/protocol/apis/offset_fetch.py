"""OffsetFetch (key 9), v0-5 as in Kafka 2.3.

Request:   group_id, topics[name, partition_indexes[]]; v0 reads ZooKeeper's offsets, v1+ the
           coordinator's; v2+ topics may be null: every offset the group committed.
Response:  topics[name, partitions[partition_index, committed_offset, metadata, error_code]];
           v2 adds a top-level error_code, v3 throttle_time_ms, v5 committed_leader_epoch.
           A partition without a committed offset answers offset -1 and error NONE.
"""

from headwater.protocol.schema import INT16, INT32, INT64, NULLABLE_STRING, STRING, Api, Array, Field, Struct

OFFSET_FETCH = Api(
    key=9,
    name="OffsetFetch",
    min_version=0,
    max_version=5,
    request=Struct(
        Field("group_id", STRING),
        Field(
            "topics",
            Array(Struct(Field("name", STRING), Field("partition_indexes", Array(INT32))), nullable_since=2),
        ),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, since=3),
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
                                Field("committed_offset", INT64, default=-1),
                                Field("committed_leader_epoch", INT32, since=5, default=-1),
                                Field("metadata", NULLABLE_STRING, default=""),
                                Field("error_code", INT16),
                            )
                        ),
                    ),
                )
            ),
        ),
        Field("error_code", INT16, since=2),
    ),
)
