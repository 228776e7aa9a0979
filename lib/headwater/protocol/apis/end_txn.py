"""EndTxn (key 26), v0-1 as in Kafka 2.3: commit (``committed`` true) or abort the producer's
transaction (sent to the transaction coordinator).

Request:  transactional_id, producer_id, producer_epoch, committed (boolean).
Response: throttle_time_ms, error_code.  v1 same as v0.
"""

from headwater.protocol.schema import BOOLEAN, INT16, INT32, INT64, STRING, Api, Field, Struct

END_TXN = Api(
    key=26,
    name="EndTxn",
    min_version=0,
    max_version=1,
    request=Struct(
        Field("transactional_id", STRING),
        Field("producer_id", INT64),
        Field("producer_epoch", INT16),
        Field("committed", BOOLEAN),
    ),
    response=Struct(Field("throttle_time_ms", INT32), Field("error_code", INT16)),
)
