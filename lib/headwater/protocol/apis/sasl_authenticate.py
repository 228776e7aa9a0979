"""SaslAuthenticate (key 36), v0-1 as in Kafka 2.3.

Request:   auth_bytes (one SASL token from the client).
Response:  error_code, error_message, auth_bytes (the server's token); v1 adds
           session_lifetime_ms (KIP-368 re-authentication; 0 = no limit, which is all we send).
"""

from headwater.protocol.schema import BYTES, INT16, INT64, NULLABLE_STRING, Api, Field, Struct

SASL_AUTHENTICATE = Api(
    key=36,
    name="SaslAuthenticate",
    min_version=0,
    max_version=1,
    request=Struct(Field("auth_bytes", BYTES)),
    response=Struct(
        Field("error_code", INT16),
        Field("error_message", NULLABLE_STRING),
        Field("auth_bytes", BYTES),
        Field("session_lifetime_ms", INT64, since=1),
    ),
)
