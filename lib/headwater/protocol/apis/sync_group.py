"""SyncGroup (key 14), v0-3 as in Kafka 2.3.

Request:   group_id, generation_id, member_id, assignments[member_id, assignment] (only the
           leader sends assignments); v3 adds group_instance_id.
Response:  error_code, assignment (this member's); v1 adds throttle_time_ms. v2 is as v1.
"""

from headwater.protocol.schema import BYTES, INT16, INT32, NULLABLE_STRING, STRING, Api, Array, Field, Struct

SYNC_GROUP = Api(
    key=14,
    name="SyncGroup",
    min_version=0,
    max_version=3,
    request=Struct(
        Field("group_id", STRING),
        Field("generation_id", INT32),
        Field("member_id", STRING),
        Field("group_instance_id", NULLABLE_STRING, since=3),
        Field("assignments", Array(Struct(Field("member_id", STRING), Field("assignment", BYTES)))),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, since=1),
        Field("error_code", INT16),
        Field("assignment", BYTES),
    ),
)
