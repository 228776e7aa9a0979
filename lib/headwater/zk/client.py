"""One connection policy for every kazoo client Headwater starts.

kazoo's default reconnect backoff doubles up to one hour (``retry_max_delay=3600``): after ZooKeeper
has been away for a few minutes, a client would try again only minutes apart, long after the ensemble
is back. Kafka's ZooKeeper client tries again about every second. Every Headwater process (broker,
ZooKeeper consumer, discovery, loader lock, mirror, CLI, bench) therefore builds its client with
:func:`kazoo_client`: reconnect attempts forever, jittered, at most :data:`RECONNECT_MAX_DELAY_S`
(±40 % jitter) apart. After a session expiry kazoo connects with a new session on its own; what the
caller registered or watched is the caller's to restore (each listens for ``KazooState.LOST``).

A connect string is Kafka's ``host:port[,host:port...][/chroot]``; :func:`split_chroot` separates
the chroot, which callers create (as Kafka does) before applying it.

Security (:mod:`headwater.zk.security`): the same function logs in with SASL DIGEST-MD5 when the
process has a JAAS ``Client`` section (Kafka's ``KAFKA_OPTS=-Djava.security.auth.login.config=...``,
or the caller's properties), and with ACLs on every znode it creates carries Kafka 2.3's default
ACLs for its path (creator-all plus world-read; creator only under the sensitive paths). kazoo
re-runs the SASL exchange on every reconnection, before any queued request is sent.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import AuthFailedError
from kazoo.protocol.states import KeeperState
from kazoo.retry import KazooRetry
from kazoo.security import ACL

from headwater.zk.security import ZkSecurity, default_acls, zk_security

#: the longest pause between two reconnect attempts (before jitter)
RECONNECT_MAX_DELAY_S = 2.0
#: the first pause; doubled after each failed attempt up to RECONNECT_MAX_DELAY_S
RECONNECT_FIRST_DELAY_S = 0.1
#: kazoo's jitter: each pause is multiplied by a uniform factor in [1 - j, 1 + j]
RECONNECT_JITTER = 0.4


def connection_retry() -> KazooRetry:
    """Reconnect forever, jittered, never more than ~RECONNECT_MAX_DELAY_S apart."""
    return KazooRetry(
        max_tries=-1,
        delay=RECONNECT_FIRST_DELAY_S,
        backoff=2,
        max_jitter=RECONNECT_JITTER,
        max_delay=RECONNECT_MAX_DELAY_S,
    )


def split_chroot(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/kafka/dc1"`` -> ``("h1:2181,h2:2181", "/kafka/dc1")``; no chroot -> ``""``."""
    hosts, slash, chroot = connect.partition("/")
    chroot = chroot.strip("/")
    return hosts, ("/" + chroot if slash and chroot else "")


class _PathAcls(list[ACL]):
    """The ACLs :func:`default_acls` chose for one path. kazoo hands a ``create(makepath=True)``'s
    ACL down to the parents it creates; a parent must get its own path's ACLs instead (otherwise
    ``/config`` made on the way to ``/config/users/alice`` would lose its world read)."""


class _AclTransaction(TransactionRequest):  # type: ignore[misc]
    def create(
        self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False, sequence: bool = False
    ) -> None:
        if acl is None:
            acl = _PathAcls(default_acls(path))
        super().create(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence)


class HeadwaterKazooClient(KazooClient):  # type: ignore[misc]
    """A KazooClient whose ``start`` says when ZooKeeper refused the SASL login.

    kazoo marks the session connected before the SASL exchange; when the server then refuses the
    login, the state turns AUTH_FAILED, and a ``start`` that had not yet looked at the state raises
    "Connection time-out" instead (seen in CI), or the chroot check's AuthFailedError with the
    client left unstopped. The login's refusal is the cause: raise it, the client stopped."""

    login_refused = False

    def _session_callback(self, state: str) -> None:
        # kazoo's one place for session states; AUTH_FAILED turns CLOSED as soon as its loop ends,
        # before ``start`` could look, so it is remembered here
        if state == KeeperState.AUTH_FAILED:
            self.login_refused = True
        super()._session_callback(state)

    def stop(self) -> None:
        # kazoo's stop() wakes its connection loop through a socket pair that close() releases; a
        # client closed before it was stopped (a failed start's clean-up, kazoo's or a caller's)
        # raises AttributeError there after it has stopped everything else: it is stopped
        try:
            super().stop()
        except AttributeError:
            if not self._stopped.is_set():
                raise

    def start(self, timeout: float = 15) -> None:
        self.login_refused = False
        try:
            super().start(timeout=timeout)
        except Exception:
            # kazoo's start() raised its time-out, or the AuthFailedError of its chroot check; the
            # client is stopped and closed here, once (a caller's stop() then returns at once)
            if self.login_refused:
                with contextlib.suppress(Exception):
                    self.stop()
                with contextlib.suppress(Exception):
                    self.close()
                raise AuthFailedError("ZooKeeper refused the SASL login") from None
            raise


class SecureKazooClient(HeadwaterKazooClient):
    """A KazooClient whose creates carry Kafka 2.3's default ACLs for their path (an explicit
    ``acl=`` still wins). Paths are the caller's, i.e. relative to the chroot, as Kafka's are."""

    def create_async(self, path: str, value: bytes = b"", acl: Any = None, *args: Any, **kwargs: Any) -> Any:
        if acl is None:
            acl = _PathAcls(default_acls(path))
        return super().create_async(path, value, acl, *args, **kwargs)

    def ensure_path_async(self, path: str, acl: Any = None) -> Any:
        if isinstance(acl, _PathAcls):
            acl = None  # each missing component gets its own path's ACLs (create_async above)
        return super().ensure_path_async(path, acl)

    def transaction(self) -> TransactionRequest:
        return _AclTransaction(self)


def kazoo_client(
    hosts: str, *, session_timeout_s: float = 10.0, security: ZkSecurity | None = None, **kwargs: Any
) -> KazooClient:
    """A (not yet started) KazooClient for ``hosts`` with Headwater's connection policy.

    ``hosts`` may carry a chroot; kazoo then applies it to every path. ``security``: the SASL login
    and whether to set ACLs; None takes them from the environment as Kafka's tools do
    (``KAFKA_OPTS``: a JAAS ``Client`` section means SASL and ACLs). Extra keyword arguments go to
    KazooClient unchanged.
    """
    if security is None:
        security = zk_security()
    cls = SecureKazooClient if security.set_acl else HeadwaterKazooClient
    sasl = security.sasl_options()
    if sasl is not None:
        kwargs.setdefault("sasl_options", sasl)
    return cls(hosts=hosts, timeout=session_timeout_s, connection_retry=connection_retry(), **kwargs)
