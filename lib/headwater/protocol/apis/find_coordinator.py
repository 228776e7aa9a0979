"""FindCoordinator (key 10), v0-2 as in Kafka 2.3.

Request:   key (the group id); v1 adds key_type (0 group, 1 transaction).
Response:  error_code, node_id, host, port; v1 adds throttle_time_ms and error_message.
v2 is the same as v1 (throttled responses are sent before throttling).
"""

from headwater.protocol.schema import INT8, INT16, INT32, NULLABLE_STRING, STRING, Api, Field, Struct

FIND_COORDINATOR = Api(
    key=10,
    name="FindCoordinator",
    min_version=0,
    max_version=2,
    request=Struct(
        Field("key", STRING),
        Field("key_type", INT8, since=1),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, since=1),
        Field("error_code", INT16),
        Field("error_message", NULLABLE_STRING, since=1),
        Field("node_id", INT32, default=-1),
        Field("host", STRING),
        Field("port", INT32, default=-1),
    ),
)
