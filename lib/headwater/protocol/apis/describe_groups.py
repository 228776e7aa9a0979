"""DescribeGroups (key 15), v0-3 as in Kafka 2.3.

Request:   groups[]; v3 adds include_authorized_operations.
Response:  groups[error_code, group_id, group_state, protocol_type, protocol_data (the chosen
           protocol, e.g. "range"), members[member_id, client_id, client_host, member_metadata,
           member_assignment]]; v1 adds throttle_time_ms; v3 authorized_operations per group
           (no authorizer here: Kafka's "not requested" value, INT32_MIN).
A group this coordinator does not know is answered with state "Dead" and no members.
"""

from headwater.protocol.schema import BOOLEAN, BYTES, INT16, INT32, STRING, Api, Array, Field, Struct

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

DESCRIBE_GROUPS = Api(
    key=15,
    name="DescribeGroups",
    min_version=0,
    max_version=3,
    request=Struct(
        Field("groups", Array(STRING)),
        Field("include_authorized_operations", BOOLEAN, since=3),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, since=1),
        Field(
            "groups",
            Array(
                Struct(
                    Field("error_code", INT16),
                    Field("group_id", STRING),
                    Field("group_state", STRING),
                    Field("protocol_type", STRING),
                    Field("protocol_data", STRING),
                    Field(
                        "members",
                        Array(
                            Struct(
                                Field("member_id", STRING),
                                Field("client_id", STRING),
                                Field("client_host", STRING),
                                Field("member_metadata", BYTES),
                                Field("member_assignment", BYTES),
                            )
                        ),
                    ),
                    Field("authorized_operations", INT32, since=3, default=AUTHORIZED_OPERATIONS_OMITTED),
                )
            ),
        ),
    ),
)
