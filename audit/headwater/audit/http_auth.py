"""Optional authentication of the audit's dashboard and JSON API (``http.auth``).

::

    http.auth = none | basic | bearer             # default none
    http.auth.username = ops                      # basic
    http.auth.password = file:/etc/headwater/audit-http.password   # basic; or env:NAME, or as written
    http.auth.token = env:AUDIT_HTTP_TOKEN        # bearer; or file:/path, or as written

With ``basic`` or ``bearer`` every page and API path answers ``401 Unauthorized`` with a
``WWW-Authenticate`` challenge (RFC 7617 / RFC 6750) unless the request carries the right
``Authorization`` header. ``/healthz`` and ``/metrics`` stay open: orchestrators' health checks
and Prometheus scrapers probe them without credentials (Kafka's and most exporters' convention),
and neither shows audited data beyond counters and health reasons — put them behind the network's
own controls if even that is sensitive. Credentials are compared in constant time; secrets come
from ``file:``/``env:`` as the clients' ``sasl.password`` does and are never logged or shown in a
``repr``. This is authentication only (one user or one token, no roles) and it does not encrypt:
put the dashboard behind TLS (a reverse proxy) when it crosses an untrusted network, or the
password travels in clear.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from headwater.security import SecurityConfigError, resolve_secret

SCHEMES = ("none", "basic", "bearer")
OPEN_PATHS = frozenset({"/healthz", "/metrics"})
REALM = "headwater-audit"


class HttpAuthConfigError(ValueError):
    """An ``http.auth*`` property we cannot use; names the property, never the secret."""


@dataclass(frozen=True)
class HttpAuth:
    scheme: str = "none"
    username: str = ""
    password: str = field(default="", repr=False)
    token: str = field(default="", repr=False)

    @property
    def enabled(self) -> bool:
        return self.scheme != "none"

    def accepts(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header value carries these credentials."""
        if not self.enabled:
            return True
        if not authorization:
            return False
        kind, _, credentials = authorization.strip().partition(" ")
        credentials = credentials.strip()
        if self.scheme == "bearer":
            return kind.lower() == "bearer" and hmac.compare_digest(credentials.encode(), self.token.encode())
        if kind.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(credentials, validate=True)
        except (binascii.Error, ValueError):
            return False
        user, sep, password = decoded.partition(b":")
        expected_user, expected_password = self.username.encode(), self.password.encode()
        user_ok = hmac.compare_digest(user, expected_user)
        password_ok = hmac.compare_digest(password, expected_password)
        return bool(sep) and user_ok and password_ok

    def challenge(self, presented: bool) -> str:
        """The ``WWW-Authenticate`` value of a 401 (``presented``: the request carried credentials)."""
        if self.scheme == "bearer":
            return f'Bearer realm="{REALM}"' + (', error="invalid_token"' if presented else "")
        return f'Basic realm="{REALM}", charset="UTF-8"'


def parse_http_auth(props: Mapping[str, str]) -> HttpAuth:
    """``http.auth*`` from the audit's properties; raises HttpAuthConfigError naming the property."""
    scheme = (props.get("http.auth") or "none").strip().lower()
    if scheme not in SCHEMES:
        raise HttpAuthConfigError(f"http.auth: {scheme!r} is not one of {', '.join(SCHEMES)}")
    given = {k for k in ("http.auth.username", "http.auth.password", "http.auth.token") if props.get(k)}
    wanted = {"none": set(), "basic": {"http.auth.username", "http.auth.password"}, "bearer": {"http.auth.token"}}
    stray = sorted(given - wanted[scheme])
    if stray:  # a token left behind while http.auth = none would look like protection that is not there
        raise HttpAuthConfigError(f"{stray[0]}: set, but http.auth = {scheme} does not use it")
    missing = sorted(wanted[scheme] - given)
    if missing:
        raise HttpAuthConfigError(f"{missing[0]}: required with http.auth = {scheme}")
    try:
        password = resolve_secret(props.get("http.auth.password"), "http.auth.password") or ""
        token = resolve_secret(props.get("http.auth.token"), "http.auth.token") or ""
    except SecurityConfigError as e:
        raise HttpAuthConfigError(str(e)) from None
    username = (props.get("http.auth.username") or "").strip()
    if ":" in username:
        raise HttpAuthConfigError("http.auth.username: must not contain ':' (HTTP basic authentication)")
    if scheme == "basic" and not password:
        raise HttpAuthConfigError("http.auth.password: empty")
    if scheme == "bearer" and not token:
        raise HttpAuthConfigError("http.auth.token: empty")
    return HttpAuth(scheme, username, password, token)


def auth_middleware(auth: HttpAuth) -> Middleware:
    """An aiohttp middleware answering 401 for any path but /healthz and /metrics without credentials."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or auth.accepts(request.headers.get("Authorization")):
            return await handler(request)
        presented = "Authorization" in request.headers
        raise web.HTTPUnauthorized(
            text="authentication required\n" if not presented else "wrong credentials\n",
            headers={"WWW-Authenticate": auth.challenge(presented)},
        )

    return check
