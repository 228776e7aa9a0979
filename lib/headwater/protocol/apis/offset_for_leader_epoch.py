"""OffsetForLeaderEpoch (key 23), v0-3 as in Kafka 2.3: the end offset of a leader epoch.

Followers ask it before truncating (KIP-101, KIP-279); consumers from v2 to detect log
truncation after a leader change (KIP-320).

Request:
  v0    topics[topic, partitions[partition, leader_epoch]].
  v1    same as v0.
  v2    adds current_leader_epoch per partition (fencing: FENCED_LEADER_EPOCH /
        UNKNOWN_LEADER_EPOCH).
  v3    adds replica_id (default -2, a "debug" consumer; followers send their broker id).
Response:
  v0    topics[topic, partitions[error_code, partition, end_offset]].
  v1    adds leader_epoch per partition (the epoch the end offset belongs to).
  v2    adds throttle_time_ms.
  v3    same as v2.

Field names are the newest Kafka JSON's; Kafka 2.3 called them topics[name,
partitions[partition_index, ...]] in both directions. UNDEFINED_EPOCH (-1) and
UNDEFINED_EPOCH_OFFSET (-1) answer an epoch the leader does not know.
"""

from headwater.protocol.schema import INT16, INT32, INT64, STRING, Api, Array, Field, Struct

#: The v3 replica_id of a "debug" consumer (Kafka's default), allowed past the high watermark.
DEBUG_REPLICA_ID = -2

OFFSET_FOR_LEADER_EPOCH = Api(
    key=23,
    name="OffsetForLeaderEpoch",
    min_version=0,
    max_version=3,
    request=Struct(
        Field("replica_id", INT32, since=3, default=DEBUG_REPLICA_ID),
        Field(
            "topics",
            Array(
                Struct(
                    Field("topic", STRING),
                    Field(
                        "partitions",
                        Array(
                            Struct(
                                Field("partition", INT32),
                                Field("current_leader_epoch", INT32, since=2, default=-1),
                                Field("leader_epoch", INT32),
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
                    Field("topic", STRING),
                    Field(
                        "partitions",
                        Array(
                            Struct(
                                Field("error_code", INT16),
                                Field("partition", INT32),
                                Field("leader_epoch", INT32, since=1, default=-1),
                                Field("end_offset", INT64, default=-1),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
)
