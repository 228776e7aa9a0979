"""LeaveGroup (key 13), v0-2 as in Kafka 2.3 (one member per request; batches came in 2.4).

Request:   group_id, member_id.
Response:  error_code; v1 adds throttle_time_ms. v2 is the same as v1.
"""

from headwater.protocol.schema import INT16, INT32, STRING, Api, Field, Struct

LEAVE_GROUP = Api(
    key=13,
    name="LeaveGroup",
    min_version=0,
    max_version=2,
    request=Struct(
        Field("group_id", STRING),
        Field("member_id", STRING),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, since=1),
        Field("error_code", INT16),
    ),
)
