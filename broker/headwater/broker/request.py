"""What a request handler knows of the request besides its body: a leaf module (issue 38 item 7).

Handlers, the authorizer and the network layer import ``RequestContext`` from here, not from the
``handlers`` package (whose ``__init__`` imports every handler): so no import, type-only ones
included, runs in a circle through the handlers.
"""

from __future__ import annotations

from dataclasses import dataclass

from headwater.protocol.frames import RequestHeader

__all__ = ["RequestContext"]


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: RequestHeader
    listener_name: str
    peer: str
    principal: str = "User:ANONYMOUS"  # KafkaPrincipal of the connection (SASL user or TLS subject)

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str | None:
        return self.header.client_id
