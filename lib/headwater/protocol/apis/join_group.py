"""JoinGroup (key 11), v0-5 as in Kafka 2.3.

Request:
  v0    group_id, session_timeout_ms, member_id, protocol_type, protocols[name, metadata].
  v1    adds rebalance_timeout_ms (v0: the session timeout is the rebalance timeout).
  v2-3  same as v1.
  v4    same fields; a new member (empty member_id) is answered MEMBER_ID_REQUIRED with its
        assigned member id and joins again with it (KIP-394).
  v5    adds group_instance_id (static membership, KIP-345).
Response:
  v0    error_code, generation_id, protocol_name, leader, member_id, members[member_id, metadata].
  v2    adds throttle_time_ms.  v5 adds members[].group_instance_id.
"""

from headwater.protocol.schema import BYTES, INT16, INT32, NULLABLE_STRING, STRING, Api, Array, Field, Struct

JOIN_GROUP = Api(
    key=11,
    name="JoinGroup",
    min_version=0,
    max_version=5,
    request=Struct(
        Field("group_id", STRING),
        Field("session_timeout_ms", INT32),
        Field("rebalance_timeout_ms", INT32, since=1, default=-1),
        Field("member_id", STRING),
        Field("group_instance_id", NULLABLE_STRING, since=5),
        Field("protocol_type", STRING),
        Field("protocols", Array(Struct(Field("name", STRING), Field("metadata", BYTES)))),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, since=2),
        Field("error_code", INT16),
        Field("generation_id", INT32, default=-1),
        Field("protocol_name", STRING),
        Field("leader", STRING),
        Field("member_id", STRING),
        Field(
            "members",
            Array(
                Struct(
                    Field("member_id", STRING),
                    Field("group_instance_id", NULLABLE_STRING, since=5),
                    Field("metadata", BYTES),
                )
            ),
        ),
    ),
)
