"""Produce (key 0), v0-7 as in Kafka 2.3.

Request:
  v0-2  acks, timeout_ms, topics[name, partitions[partition_index, records]]; records are
        legacy message sets (magic 0; magic 1 from v2) that the broker up-converts to magic 2.
  v3    adds transactional_id; records must be record batches (magic 2).
  v4    same as v3; the client must handle KAFKA_STORAGE_ERROR.
  v5-6  same as v3.
  v7    same; batches may be zstd-compressed (KIP-110).
Response:
  v0    responses[name, partitions[partition_index, error_code, base_offset]].
  v1    adds throttle_time_ms.
  v2    adds log_append_time_ms per partition.
  v3-4  same as v2 (v4 may return KAFKA_STORAGE_ERROR).
  v5    adds log_start_offset per partition.
  v6-7  same as v5.

Field names are Kafka 2.3's (``topics``/``partitions``/``partition_index``); newer Kafka
JSON calls them ``topic_data``/``partition_data``/``index`` with the same wire layout.
"""

from headwater.protocol.schema import (
    INT16,
    INT32,
    INT64,
    NULLABLE_STRING,
    RECORDS,
    STRING,
    Api,
    Array,
    Field,
    Struct,
)

PRODUCE = Api(
    key=0,
    name="Produce",
    min_version=0,
    max_version=7,
    request=Struct(
        Field("transactional_id", NULLABLE_STRING, since=3),
        Field("acks", INT16),
        Field("timeout_ms", INT32),
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
                                Field("records", RECORDS),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
    response=Struct(
        Field(
            "responses",
            Array(
                Struct(
                    Field("name", STRING),
                    Field(
                        "partitions",
                        Array(
                            Struct(
                                Field("partition_index", INT32),
                                Field("error_code", INT16),
                                Field("base_offset", INT64),
                                Field("log_append_time_ms", INT64, since=2, default=-1),
                                Field("log_start_offset", INT64, since=5, default=-1),
                            )
                        ),
                    ),
                )
            ),
        ),
        Field("throttle_time_ms", INT32, since=1),
    ),
)
