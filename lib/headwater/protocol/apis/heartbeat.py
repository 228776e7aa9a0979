"""Heartbeat (key 12), v0-3 as in Kafka 2.3.

Request:   group_id, generation_id, member_id; v3 adds group_instance_id.
Response:  error_code; v1 adds throttle_time_ms. v2 is the same as v1.
"""

from headwater.protocol.schema import INT16, INT32, NULLABLE_STRING, STRING, Api, Field, Struct

HEARTBEAT = Api(
    key=12,
    name="Heartbeat",
    min_version=0,
    max_version=3,
    request=Struct(
        Field("group_id", STRING),
        Field("generation_id", INT32),
        Field("member_id", STRING),
        Field("group_instance_id", NULLABLE_STRING, since=3),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, since=1),
        Field("error_code", INT16),
    ),
)
