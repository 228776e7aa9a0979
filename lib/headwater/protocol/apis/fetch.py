"""Fetch (key 1), v4-11 as in Kafka 2.3 (v0-3 are not offered: they carry legacy message
sets and we store magic-2 batches only, never down-converting).

Request:
  v3    max_bytes (response-wide limit; partitions are served in request order).
  v4    isolation_level; the client must handle record batches (magic 2).  Our minimum.
  v5    log_start_offset per partition (set by follower replicas).
  v6    same as v5.
  v7    incremental fetch sessions: session_id, session_epoch, forgotten_topics_data.
  v8    same as v7.
  v9    current_leader_epoch per partition (KIP-320).
  v10   same as v9; batches may be zstd-compressed (KIP-110).
  v11   rack_id of the consumer (KIP-392).
Response:
  v4    last_stable_offset and aborted_transactions (nullable) per partition.
  v5    log_start_offset per partition.
  v6    same; may return KAFKA_STORAGE_ERROR.
  v7    top-level error_code and session_id.
  v8-10 same as v7.
  v11   preferred_read_replica per partition (KIP-392).

Field names follow the newest Kafka JSON (2.3 called them max_wait, epoch, topics[name,
fetch_partitions[partition_index, max_bytes]], forgotten[name, forgotten_partition_indexes]
and, in the response, topics[name, ...aborted]).
"""

from headwater.protocol.schema import (
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    Api,
    Array,
    Field,
    Struct,
)

FETCH = Api(
    key=1,
    name="Fetch",
    min_version=4,
    max_version=11,
    request=Struct(
        Field("replica_id", INT32, default=-1),
        Field("max_wait_ms", INT32),
        Field("min_bytes", INT32),
        Field("max_bytes", INT32, since=3, default=0x7FFFFFFF),
        Field("isolation_level", INT8, since=4),
        Field("session_id", INT32, since=7),
        Field("session_epoch", INT32, since=7, default=-1),
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
                                Field("current_leader_epoch", INT32, since=9, default=-1),
                                Field("fetch_offset", INT64),
                                Field("log_start_offset", INT64, since=5, default=-1),
                                Field("partition_max_bytes", INT32),
                            )
                        ),
                    ),
                )
            ),
        ),
        Field(
            "forgotten_topics_data",
            Array(
                Struct(
                    Field("topic", STRING),
                    Field("partitions", Array(INT32)),
                )
            ),
            since=7,
        ),
        Field("rack_id", STRING, since=11),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, since=1),
        Field("error_code", INT16, since=7),
        Field("session_id", INT32, since=7),
        Field(
            "responses",
            Array(
                Struct(
                    Field("topic", STRING),
                    Field(
                        "partitions",
                        Array(
                            Struct(
                                Field("partition_index", INT32),
                                Field("error_code", INT16),
                                Field("high_watermark", INT64),
                                Field("last_stable_offset", INT64, since=4, default=-1),
                                Field("log_start_offset", INT64, since=5, default=-1),
                                Field(
                                    "aborted_transactions",
                                    Array(
                                        Struct(
                                            Field("producer_id", INT64),
                                            Field("first_offset", INT64),
                                        ),
                                        nullable_since=4,
                                    ),
                                    since=4,
                                ),
                                Field("preferred_read_replica", INT32, since=11, default=-1),
                                Field("records", RECORDS),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
)
