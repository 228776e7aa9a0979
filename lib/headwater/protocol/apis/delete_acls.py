"""DeleteAcls (key 31), v0-1 as in Kafka 2.3.

Request:   filters [resource_type_filter, resource_name_filter, principal_filter, host_filter,
           operation, permission_type]; v1 adds pattern_type_filter (LITERAL = 3 when absent).
Response:  throttle_time_ms, filter_results [error_code, error_message, matching_acls [error_code,
           error_message, resource_type, resource_name, principal, host, operation,
           permission_type]]; v1 adds each matching ACL's pattern_type.
"""

from headwater.protocol.schema import INT8, INT16, INT32, NULLABLE_STRING, STRING, Api, Array, Field, Struct

DELETE_ACLS = Api(
    key=31,
    name="DeleteAcls",
    min_version=0,
    max_version=1,
    request=Struct(
        Field(
            "filters",
            Array(
                Struct(
                    Field("resource_type_filter", INT8),
                    Field("resource_name_filter", NULLABLE_STRING),
                    Field("pattern_type_filter", INT8, since=1, default=3),
                    Field("principal_filter", NULLABLE_STRING),
                    Field("host_filter", NULLABLE_STRING),
                    Field("operation", INT8),
                    Field("permission_type", INT8),
                )
            ),
        ),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field(
            "filter_results",
            Array(
                Struct(
                    Field("error_code", INT16),
                    Field("error_message", NULLABLE_STRING),
                    Field(
                        "matching_acls",
                        Array(
                            Struct(
                                Field("error_code", INT16),
                                Field("error_message", NULLABLE_STRING),
                                Field("resource_type", INT8),
                                Field("resource_name", STRING),
                                Field("pattern_type", INT8, since=1, default=3),
                                Field("principal", STRING),
                                Field("host", STRING),
                                Field("operation", INT8),
                                Field("permission_type", INT8),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
)
