"""SaslHandshake (key 17), v0-1 as in Kafka 2.3.

Request:   mechanism (SCRAM-SHA-512, PLAIN, ...).
Response:  error_code, mechanisms (the ones this listener enables).
v1 has the same fields; it only means the SASL tokens that follow travel inside SaslAuthenticate
requests. After v0, the tokens follow as raw size-prefixed frames with no Kafka header.
"""

from headwater.protocol.schema import INT16, STRING, Api, Array, Field, Struct

SASL_HANDSHAKE = Api(
    key=17,
    name="SaslHandshake",
    min_version=0,
    max_version=1,
    request=Struct(Field("mechanism", STRING)),
    response=Struct(
        Field("error_code", INT16),
        Field("mechanisms", Array(STRING)),
    ),
)
