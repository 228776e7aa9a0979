"""DescribeAcls (key 29), v0-1 as in Kafka 2.3.

Request:   a filter: resource_type_filter, resource_name_filter (null = any), principal_filter,
           host_filter, operation, permission_type; v1 adds pattern_type_filter (KIP-290;
           LITERAL = 3 when absent).
Response:  throttle_time_ms, error_code, error_message, resources [resource_type, resource_name,
           acls [principal, host, operation, permission_type]]; v1 adds each resource's pattern_type.
Codes (int8): resource types 1 ANY, 2 TOPIC, 3 GROUP, 4 CLUSTER, 5 TRANSACTIONAL_ID; operations
1 ANY, 2 ALL, 3 READ ... 12 IDEMPOTENT_WRITE; permission 1 ANY, 2 DENY, 3 ALLOW; patterns 1 ANY,
2 MATCH, 3 LITERAL, 4 PREFIXED (headwater/acls.py has the tables).
"""

from headwater.protocol.schema import INT8, INT16, INT32, NULLABLE_STRING, STRING, Api, Array, Field, Struct

DESCRIBE_ACLS = Api(
    key=29,
    name="DescribeAcls",
    min_version=0,
    max_version=1,
    request=Struct(
        Field("resource_type_filter", INT8),
        Field("resource_name_filter", NULLABLE_STRING),
        Field("pattern_type_filter", INT8, since=1, default=3),
        Field("principal_filter", NULLABLE_STRING),
        Field("host_filter", NULLABLE_STRING),
        Field("operation", INT8),
        Field("permission_type", INT8),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("error_message", NULLABLE_STRING),
        Field(
            "resources",
            Array(
                Struct(
                    Field("resource_type", INT8),
                    Field("resource_name", STRING),
                    Field("pattern_type", INT8, since=1, default=3),
                    Field(
                        "acls",
                        Array(
                            Struct(
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
