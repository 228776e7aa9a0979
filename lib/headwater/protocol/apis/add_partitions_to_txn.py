"""AddPartitionsToTxn (key 24), v0-1 as in Kafka 2.3: a transactional producer names the partitions
it is about to write, before its first produce to each (sent to the transaction coordinator).

Request:  transactional_id, producer_id, producer_epoch, topics[name, partitions[int32]].
Response: throttle_time_ms, results[name, results_by_partition[partition_index, partition_error_code]]
          (Kafka 2.3 calls the inner two ``results`` and ``error_code``; the names are the newer JSON's).
  v1    same as v0 (a throttled response is sent before throttling).
"""

from headwater.protocol.schema import INT16, INT32, INT64, STRING, Api, Array, Field, Struct

ADD_PARTITIONS_TO_TXN = Api(
    key=24,
    name="AddPartitionsToTxn",
    min_version=0,
    max_version=1,
    request=Struct(
        Field("transactional_id", STRING),
        Field("producer_id", INT64),
        Field("producer_epoch", INT16),
        Field("topics", Array(Struct(Field("name", STRING), Field("partitions", Array(INT32))))),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field(
            "results",
            Array(
                Struct(
                    Field("name", STRING),
                    Field(
                        "results_by_partition",
                        Array(Struct(Field("partition_index", INT32), Field("partition_error_code", INT16))),
                    ),
                )
            ),
        ),
    ),
)
