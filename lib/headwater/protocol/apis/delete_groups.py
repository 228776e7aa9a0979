"""DeleteGroups (key 42), v0-1 as in Kafka 2.3.

Request:   groups_names[].
Response:  throttle_time_ms, results[group_id, error_code]: NON_EMPTY_GROUP while the group has
           members, GROUP_ID_NOT_FOUND for a group the coordinator does not know, NOT_COORDINATOR.
"""

from headwater.protocol.schema import INT16, INT32, STRING, Api, Array, Field, Struct

DELETE_GROUPS = Api(
    key=42,
    name="DeleteGroups",
    min_version=0,
    max_version=1,
    request=Struct(Field("groups_names", Array(STRING))),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("results", Array(Struct(Field("group_id", STRING), Field("error_code", INT16)))),
    ),
)
