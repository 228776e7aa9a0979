"""TxnOffsetCommit (key 28), v0-2 as in Kafka 2.3: a transactional producer commits a group's
offsets inside its transaction (sent to the group coordinator after AddOffsetsToTxn); they become
visible to OffsetFetch only when the transaction commits.

Request:
  v0    transactional_id, group_id, producer_id, producer_epoch,
        topics[name, partitions[partition_index, committed_offset, committed_metadata (nullable)]].
  v1    same as v0.
  v2    adds committed_leader_epoch per partition.
Response: throttle_time_ms, topics[name, partitions[partition_index, error_code]].
"""

from headwater.protocol.schema import INT16, INT32, INT64, NULLABLE_STRING, STRING, Api, Array, Field, Struct

TXN_OFFSET_COMMIT = Api(
    key=28,
    name="TxnOffsetCommit",
    min_version=0,
    max_version=2,
    request=Struct(
        Field("transactional_id", STRING),
        Field("group_id", STRING),
        Field("producer_id", INT64),
        Field("producer_epoch", INT16),
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
                                Field("committed_leader_epoch", INT32, since=2, default=-1),
                                Field("committed_metadata", NULLABLE_STRING),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
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
