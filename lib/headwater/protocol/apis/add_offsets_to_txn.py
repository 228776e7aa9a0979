"""AddOffsetsToTxn (key 25), v0-1 as in Kafka 2.3: a transactional producer is about to commit a
group's offsets in its transaction (send_offsets_to_transaction); the coordinator adds the group's
``__consumer_offsets`` partition to the transaction.

Request:  transactional_id, producer_id, producer_epoch, group_id.
Response: throttle_time_ms, error_code.  v1 same as v0.
"""

from headwater.protocol.schema import INT16, INT32, INT64, STRING, Api, Field, Struct

ADD_OFFSETS_TO_TXN = Api(
    key=25,
    name="AddOffsetsToTxn",
    min_version=0,
    max_version=1,
    request=Struct(
        Field("transactional_id", STRING),
        Field("producer_id", INT64),
        Field("producer_epoch", INT16),
        Field("group_id", STRING),
    ),
    response=Struct(Field("throttle_time_ms", INT32), Field("error_code", INT16)),
)
