"""InitProducerId (key 22), v0-1 as in Kafka 2.3: a producer id and epoch for an idempotent producer.

Request:
  v0    transactional_id (nullable), transaction_timeout_ms.
  v1    same as v0.
Response:
  v0    throttle_time_ms, error_code, producer_id, producer_epoch.
  v1    same as v0 (a throttled response is sent before throttling).

v2 (Kafka 2.4) is the first flexible version; v3 adds producer_id and producer_epoch to the
request (KIP-360). Headwater has no transactions: only a null transactional_id is served.
"""

from headwater.protocol.schema import INT16, INT32, INT64, NULLABLE_STRING, Api, Field, Struct

INIT_PRODUCER_ID = Api(
    key=22,
    name="InitProducerId",
    min_version=0,
    max_version=1,
    request=Struct(
        Field("transactional_id", NULLABLE_STRING),
        Field("transaction_timeout_ms", INT32),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("producer_id", INT64, default=-1),
        Field("producer_epoch", INT16, default=-1),
    ),
)
