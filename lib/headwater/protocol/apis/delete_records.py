"""DeleteRecords (key 21), v0-1 as in Kafka 2.3 (KIP-107).

Request:
  v0    topics[name, partitions[partition_index, offset]], timeout_ms.
  v1    same as v0.
Response:
  v0    throttle_time_ms, topics[name, partitions[partition_index, low_watermark, error_code]].
  v1    same as v0 (throttled responses are sent before throttling).

``offset`` is the new log start offset (-1: the high watermark); ``low_watermark`` is the
partition's log start offset once every in-sync replica has moved it.
"""

from headwater.protocol.schema import (
    INT16,
    INT32,
    INT64,
    STRING,
    Api,
    Array,
    Field,
    Struct,
)

DELETE_RECORDS = Api(
    key=21,
    name="DeleteRecords",
    min_version=0,
    max_version=1,
    request=Struct(
        Field(
            "topics",
            Array(
                Struct(
                    Field("name", STRING),
                    Field("partitions", Array(Struct(Field("partition_index", INT32), Field("offset", INT64)))),
                )
            ),
        ),
        Field("timeout_ms", INT32, default=60000),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
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
                                Field("low_watermark", INT64),
                                Field("error_code", INT16),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
)
