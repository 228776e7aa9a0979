"""ListGroups (key 16), v0-2 as in Kafka 2.3: the groups this broker coordinates.

Request:   (empty).
Response:  error_code, groups[group_id, protocol_type]; v1 adds throttle_time_ms; v2 as v1.
"""

from headwater.protocol.schema import INT16, INT32, STRING, Api, Array, Field, Struct

LIST_GROUPS = Api(
    key=16,
    name="ListGroups",
    min_version=0,
    max_version=2,
    request=Struct(),
    response=Struct(
        Field("throttle_time_ms", INT32, since=1),
        Field("error_code", INT16),
        Field("groups", Array(Struct(Field("group_id", STRING), Field("protocol_type", STRING)))),
    ),
)
