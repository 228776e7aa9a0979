"""CreateAcls (key 30), v0-1 as in Kafka 2.3.

Request:   creations [resource_type, resource_name, principal, host, operation, permission_type];
           v1 adds resource_pattern_type (LITERAL = 3 when absent).
Response:  throttle_time_ms, results [error_code, error_message], one per creation, in order.
"""

from headwater.protocol.schema import INT8, INT16, INT32, NULLABLE_STRING, STRING, Api, Array, Field, Struct

CREATE_ACLS = Api(
    key=30,
    name="CreateAcls",
    min_version=0,
    max_version=1,
    request=Struct(
        Field(
            "creations",
            Array(
                Struct(
                    Field("resource_type", INT8),
                    Field("resource_name", STRING),
                    Field("resource_pattern_type", INT8, since=1, default=3),
                    Field("principal", STRING),
                    Field("host", STRING),
                    Field("operation", INT8),
                    Field("permission_type", INT8),
                )
            ),
        ),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("results", Array(Struct(Field("error_code", INT16), Field("error_message", NULLABLE_STRING)))),
    ),
)
