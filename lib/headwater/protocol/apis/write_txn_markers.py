"""WriteTxnMarkers (key 27), v0 as in Kafka 2.3: inter-broker, the transaction coordinator asks a
partition leader to append a commit or abort marker (a control batch) for a producer.

Request:  markers[producer_id, producer_epoch, transaction_result (true: commit),
          topics[name, partition_indexes[int32]], coordinator_epoch int32].
Response: markers[producer_id, topics[name, partitions[partition_index, error_code]]].
"""

from headwater.protocol.schema import BOOLEAN, INT16, INT32, INT64, STRING, Api, Array, Field, Struct

WRITE_TXN_MARKERS = Api(
    key=27,
    name="WriteTxnMarkers",
    min_version=0,
    max_version=0,
    request=Struct(
        Field(
            "markers",
            Array(
                Struct(
                    Field("producer_id", INT64),
                    Field("producer_epoch", INT16),
                    Field("transaction_result", BOOLEAN),
                    Field("topics", Array(Struct(Field("name", STRING), Field("partition_indexes", Array(INT32))))),
                    Field("coordinator_epoch", INT32),
                )
            ),
        ),
    ),
    response=Struct(
        Field(
            "markers",
            Array(
                Struct(
                    Field("producer_id", INT64),
                    Field(
                        "topics",
                        Array(
                            Struct(
                                Field("name", STRING),
                                Field(
                                    "partitions",
                                    Array(Struct(Field("partition_index", INT32), Field("error_code", INT16))),
                                ),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
)
