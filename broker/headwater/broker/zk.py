"""ZooKeeper, the Kafka 2.x way, through kazoo.

Paths (as in Apache Kafka's ZooKeeper era)::

    /brokers/ids/<id>                              ephemeral; endpoints, rack (registration v4 JSON)
    /brokers/topics/<topic>                        {"version":1,"partitions":{"0":[1,2],...}}
    /brokers/topics/<topic>/partitions/<p>/state   {"controller_epoch":..,"leader":..,"version":1,
                                                    "leader_epoch":..,"isr":[..]}
    /config/topics/<topic>                         {"version":1,"config":{...}}
    /admin/delete_topics/<topic>                   a topic marked for deletion
    /controller, /controller_epoch                 (the controller issue)

kazoo runs its own thread. Every blocking kazoo call goes through :meth:`ZooKeeper.call`
(a worker thread), and every kazoo callback reaches the event loop through one bridge,
``loop.call_soon_threadsafe``: the event loop never blocks on ZooKeeper.

Reads and writes of many znodes at once (the controller's partition states, a leader's ISR
changes) go through kazoo's asynchronous API instead (:meth:`ZooKeeper.get_many`,
:meth:`ZooKeeper.set_many`, :meth:`ZooKeeper.create_many`, :meth:`ZooKeeper.delete_many`): the
requests are pipelined on the one session, so N znodes cost about one round trip plus N small
writes on the socket, not N round trips through a worker thread each. With thousands of
partitions that is the difference between seconds and minutes (issue 26).

The controller's partition-state writes go through :meth:`ZooKeeper.set_many_checked` instead:
ZooKeeper ``multi`` transactions of up to :data:`MULTI_MAX_OPS` conditional writes, each multi
opening with a version check of ``/controller_epoch`` (Kafka 2.x's fencing of a zombie
controller, KAFKA-6082), so a few multis carry thousands of elections. A multi is all or
nothing: when one write in it meets a newer version, every write of that multi is tried again
on its own (a check and the write), so each partition gets its own answer and only the
conflicting ones are re-read by the caller. Its partition-state reads use ZooKeeper's
``multiRead`` (:mod:`headwater.broker.zk_multi_read`, 500 znodes a request) when the server is
3.6 or newer, as its ``srvr`` answer says; otherwise the pipelined reads above.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from kazoo.client import KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError, UnimplementedError
from kazoo.protocol.states import ZnodeStat

from headwater.broker.zk_multi_read import MULTI_READ_SINCE, MultiRead, MultiReadDecodeError, server_version
from headwater.zk.client import kazoo_client, split_chroot
from headwater.zk.json import ZnodeFormatError
from headwater.zk.json import to_json as to_json  # re-exported for the broker's writers
from headwater.zk.paths import PERSISTENT_PATHS
from headwater.zk.security import ZkSecurity

log = logging.getLogger(__name__)

T = TypeVar("T")

#: At most this many asynchronous requests outstanding per batch call: bounds kazoo's queue and
#: ZooKeeper's per-session backlog while keeping the pipe full.
PIPELINE_DEPTH = 1000

#: At most this many writes per ZooKeeper multi (plus its check op). Large enough that 10,000
#: elections are a handful of round trips; small enough that one conflicting write sends only
#: this many writes to the one-by-one fallback.
MULTI_MAX_OPS = 500
#: At most this many znodes per multiRead (``get_many(small=True)``): 500 partition states answer
#: in well under 1 MiB (each is ~80 bytes of JSON and a 68-byte stat).
MULTI_READ_MAX_OPS = 500
#: And at most this many request bytes per multi: ZooKeeper refuses a packet larger than its
#: ``jute.maxbuffer`` (1 MiB by default) and closes the connection; half of it leaves room for
#: long topic names and large ISRs without ever coming near.
MULTI_MAX_BYTES = 512 * 1024
#: The request bytes a write costs besides its path and data: the multi header (type, done,
#: err: 9 bytes), the path's and the data's length prefixes and the version (4 bytes each).
_MULTI_OP_OVERHEAD = 9 + 4 + 4 + 4


def from_json(data: bytes | None) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        log.warning("ignoring znode with invalid JSON: %r", data[:200])
        return None


class CheckVersionFailed(Exception):
    """The znode a guarded write checks (``/controller_epoch``) is no longer at the expected
    version: another controller was elected, and this one must stop writing (Kafka's
    ``ControllerMovedException``)."""

    def __init__(self, path: str, expected_version: int, cause: BaseException) -> None:
        super().__init__(f"{path} is no longer at version {expected_version}: {type(cause).__name__}")
        self.path = path
        self.expected_version = expected_version


def _multi_batches(writes: Sequence[tuple[str, bytes, int]]) -> list[list[int]]:
    """The writes' indexes cut into multis of at most MULTI_MAX_OPS writes and MULTI_MAX_BYTES."""
    batches: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, (path, data, _version) in enumerate(writes):
        cost = _MULTI_OP_OVERHEAD + len(path.encode()) + len(data)
        if current and (len(current) >= MULTI_MAX_OPS or size + cost > MULTI_MAX_BYTES):
            batches.append(current)
            current, size = [], 0
        current.append(i)
        size += cost
    if current:
        batches.append(current)
    return batches


class ZooKeeper:
    """A kazoo client bridged onto an asyncio loop."""

    def __init__(
        self, connect: str, session_timeout_ms: int, connection_timeout_ms: int, security: ZkSecurity | None = None
    ) -> None:
        self.connect_string = connect
        self.connection_timeout_ms = connection_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        hosts, self.chroot = split_chroot(connect)
        # Connect without the chroot, create it if missing (as Kafka does), then apply it.
        # security: SASL login and zookeeper.set.acl (None: as a tool, from KAFKA_OPTS)
        self.client = kazoo_client(hosts, session_timeout_s=session_timeout_ms / 1000.0, security=security)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state_listeners: list[Callable[[str], None]] = []
        self._multi_read_ok: bool | None = None  # whether this connection's server has multiRead
        self._state_changes = 0  # kazoo state changes so far: a reconnection may reach another server

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "ZooKeeper.start() first"
        return self._loop

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.client.add_listener(self._on_state)
        try:
            await self.call(self.client.start, self.connection_timeout_ms / 1000.0)
            # a refused SASL login (AuthFailedError) shows on the first request, not in start()
            await self.call(self.client.exists, "/")
        except Exception as e:
            await self.call(self.client.stop)  # stopped before closed: a later stop() has nothing to wake
            await self.call(self.client.close)
            raise ConnectionError(
                f"could not connect to ZooKeeper at {self.connect_string} within "
                f"{self.connection_timeout_ms} ms (zookeeper.connection.timeout.ms): {type(e).__name__} {e}"
            ) from None
        if self.chroot:
            await self.call(self.client.ensure_path, self.chroot)
            self.client.chroot = self.chroot
        for path in PERSISTENT_PATHS:
            await self.call(self.client.ensure_path, path)
        await self._multi_read_supported()  # now, not in the middle of a controller failover

    async def stop(self) -> None:
        if self._loop is None:
            return
        await self.call(self.client.stop)
        await self.call(self.client.close)

    def _on_state(self, state: str) -> None:  # kazoo thread
        self._state_changes += 1
        self._multi_read_ok = None  # a new connection may be to another server of the ensemble
        if self._loop is None or self._loop.is_closed():
            return
        for listener in list(self._state_listeners):
            self._loop.call_soon_threadsafe(listener, state)

    def add_state_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(state)`` on the loop for each of kazoo's LOST / SUSPENDED / CONNECTED."""
        self._state_listeners.append(listener)

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking kazoo call on a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args, **kwargs))

    def _future(self, async_result: Any) -> asyncio.Future[Any]:
        """An asyncio future settled from a kazoo ``IAsyncResult`` (completed on kazoo's thread)."""
        loop = self.loop
        fut: asyncio.Future[Any] = loop.create_future()

        def settle(value: Any, error: BaseException | None) -> None:
            if fut.done():
                return
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(value)

        def on_kazoo_thread(result: Any) -> None:
            try:
                value, error = result.get_nowait(), None
            except BaseException as e:  # handed to the awaiting coroutine
                value, error = None, e
            if not loop.is_closed():
                loop.call_soon_threadsafe(settle, value, error)

        async_result.rawlink(on_kazoo_thread)
        return fut

    async def _pipelined(self, start: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``start(item)`` (a kazoo ``*_async`` call) for every item, at most PIPELINE_DEPTH
        outstanding; each result, or the exception it raised, in the items' order.

        A sliding window, not batches: ZooKeeper answers a session's requests in order, so once
        the window is full the next request leaves as soon as the oldest is answered, and the pipe
        never drains between batches (issue 26: a failover reads and writes thousands of
        partition states). Answers are handed to the loop in bursts (one wake-up for all those
        that arrived meanwhile), not one future and one ``call_soon_threadsafe`` each: that
        bridging cost as much as kazoo itself for 10,000 reads.
        """
        loop = self.loop
        results: list[Any] = [None] * len(items)
        arrived: list[tuple[int, Any]] = []  # (index, value or exception), appended on kazoo's thread
        lock = threading.Lock()
        drain_scheduled = False
        completed = 0
        waiter: asyncio.Future[None] | None = None

        def drain() -> None:  # on the loop
            nonlocal drain_scheduled, completed
            with lock:
                batch = arrived[:]
                arrived.clear()
                drain_scheduled = False
            for i, outcome in batch:
                results[i] = outcome
            completed += len(batch)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

        def on_answer(i: int) -> Callable[[Any], None]:
            def on_kazoo_thread(result: Any) -> None:
                nonlocal drain_scheduled
                try:
                    outcome = result.get_nowait()
                except BaseException as e:  # handed to the caller as the item's result
                    outcome = e
                with lock:
                    arrived.append((i, outcome))
                    if drain_scheduled:
                        return
                    drain_scheduled = True
                if not loop.is_closed():
                    loop.call_soon_threadsafe(drain)

            return on_kazoo_thread

        for i, item in enumerate(items):
            while i - completed >= PIPELINE_DEPTH:
                waiter = loop.create_future()
                await waiter
            try:
                start(item).rawlink(on_answer(i))
            except Exception as e:  # kazoo refuses at once (e.g. no connection)
                with lock:
                    arrived.append((i, e))
                drain()
        while completed < len(items):
            waiter = loop.create_future()
            await waiter
        return results

    async def get_many(
        self, paths: Sequence[str], small: bool = False, decode: Callable[[bytes | None], Any] | None = None
    ) -> list[tuple[Any, ZnodeStat] | None]:
        """Each znode's value and stat (None where absent), read pipelined. The value is its JSON, or
        ``decode(data)`` (a headwater.zk decoder) when given; a ZnodeFormatError there reads as absent.

        ``small``: the znodes are small (partition states: well under a KiB each), so
        MULTI_READ_MAX_OPS of them fit one response far below ``jute.maxbuffer``; they are read
        with ZooKeeper's multiRead (:mod:`headwater.broker.zk_multi_read`) when the server has it.
        """
        raw: list[Any] | None = None
        if small and paths and await self._multi_read_supported():
            raw = await self._multi_read(paths)
        if raw is None:
            raw = await self._pipelined(self.client.get_async, paths)
        out: list[tuple[Any, ZnodeStat] | None] = []
        for r in raw:
            if isinstance(r, NoNodeError):
                out.append(None)
            elif isinstance(r, BaseException):
                raise r
            elif decode is None:
                out.append((from_json(r[0]), r[1]))
            else:
                try:
                    out.append((decode(r[0]), r[1]))
                except ZnodeFormatError:
                    log.warning("ignoring a malformed znode: %r", bytes(r[0] or b"")[:200])
                    out.append(None)
        return out

    async def _multi_read_supported(self) -> bool:
        """Whether the server of this connection answers multiRead (3.6+), from its ``srvr``
        four-letter word (on by default in every version's whitelist); asked once per
        connection. A server that does not say is not sent multiRead: to a server without it,
        an unknown opcode closes the connection."""
        known = self._multi_read_ok
        if known is not None:
            return known
        asked_at = self._state_changes
        try:
            version = server_version(await self.call(self.client.command, b"srvr"))
        except Exception as e:  # no answer: keep the pipelined reads
            log.info("ZooKeeper did not answer srvr (%s): reading znodes one request each", e)
            version = None
        supported = version is not None and version >= MULTI_READ_SINCE
        if asked_at == self._state_changes:  # still the server that answered
            self._multi_read_ok = supported
            log.info(
                "ZooKeeper server version %s: reading many znodes %s",
                ".".join(map(str, version)) if version else "unknown",
                "with multiRead" if supported else "one request each (multiRead needs 3.6+)",
            )
        return supported

    async def _multi_read(self, paths: Sequence[str]) -> list[Any] | None:
        """The raw answers of a multiRead of ``paths`` (MULTI_READ_MAX_OPS per request, pipelined),
        one ``(data, stat)`` or exception each; None when the server refused multiRead (the
        caller reads them the other way)."""
        chroot = self.client.chroot or ""
        batches = [
            tuple(chroot + p for p in paths[i : i + MULTI_READ_MAX_OPS])
            for i in range(0, len(paths), MULTI_READ_MAX_OPS)
        ]

        def start(batch: tuple[str, ...]) -> Any:
            async_result = self.client.handler.async_result()
            self.client._call(MultiRead(batch), async_result)  # as kazoo's own TransactionRequest does
            return async_result

        answers = await self._pipelined(start, batches)
        raw: list[Any] = []
        for answer in answers:
            if isinstance(answer, UnimplementedError):  # reconnected to an older server meanwhile
                log.warning("ZooKeeper refused multiRead: reading znodes one request each from now on")
                self._multi_read_ok = False
                return None
            if isinstance(answer, BaseException):
                raise answer
            raw.extend(answer)
        if len(raw) != len(paths):
            raise MultiReadDecodeError(f"multiRead of {len(paths)} znodes answered {len(raw)}")
        return raw

    async def set_many(self, writes: Sequence[tuple[str, bytes, int]]) -> list[ZnodeStat | Exception]:
        """Conditional writes ``(path, data, version)``, pipelined; each new stat or its exception
        (``BadVersionError``, ``NoNodeError``, ...): callers decide per znode."""
        return await self._pipelined(lambda w: self.client.set_async(w[0], w[1], version=w[2]), writes)

    async def set_many_checked(
        self, writes: Sequence[tuple[str, bytes, int]], check_path: str, check_version: int
    ) -> list[ZnodeStat | Exception]:
        """Conditional writes ``(path, data, version)``, each also conditional on ``check_path``
        being at ``check_version`` (the controller epoch znode); each new stat or its exception
        (``BadVersionError``, ``NoNodeError``, ...), as :meth:`set_many`.

        The writes go out in ZooKeeper multis (:func:`_multi_batches`), each ``[check, set,
        set, ...]``, pipelined. A multi is atomic: when one of its writes fails its version check
        none is applied, and ZooKeeper names only the first failure. Every write of such a multi
        is then tried again alone, as ``[check, set]`` (pipelined too), so a write conflicting
        with a leader's ISR change costs that partition a re-read in the caller, not the batch.

        Raises :class:`CheckVersionFailed` when the check fails (another controller's epoch),
        after every request sent has been answered: writes answered before it may have been
        applied (they were checked against the epoch this controller still held).
        """
        if not writes:
            return []
        results: list[ZnodeStat | Exception | None] = [None] * len(writes)
        batches = _multi_batches(writes)
        outcomes = await self._pipelined(
            lambda batch: self._commit_checked(writes, batch, check_path, check_version), batches
        )
        retry: list[int] = []
        for batch, outcome in zip(batches, outcomes, strict=True):
            if isinstance(outcome, BaseException):  # connection loss, session expiry: unknown outcome
                for i in batch:
                    results[i] = outcome if isinstance(outcome, Exception) else RuntimeError(repr(outcome))
                continue
            self._raise_if_check_failed(outcome[0], check_path, check_version)
            if all(not isinstance(r, Exception) for r in outcome):
                for i, stat in zip(batch, outcome[1:], strict=True):
                    results[i] = stat
            else:
                retry.extend(batch)
        if retry:
            singles = await self._pipelined(
                lambda i: self._commit_checked(writes, [i], check_path, check_version), retry
            )
            for i, outcome in zip(retry, singles, strict=True):
                if isinstance(outcome, BaseException):
                    results[i] = outcome if isinstance(outcome, Exception) else RuntimeError(repr(outcome))
                    continue
                self._raise_if_check_failed(outcome[0], check_path, check_version)
                results[i] = outcome[1]  # the stat, or the write's own error (BadVersionError, NoNodeError)
        out = [r for r in results if r is not None]
        assert len(out) == len(writes)
        return out

    def _commit_checked(
        self, writes: Sequence[tuple[str, bytes, int]], batch: list[int], check_path: str, check_version: int
    ) -> Any:
        tx = self.client.transaction()
        tx.check(check_path, check_version)
        for i in batch:
            path, data, version = writes[i]
            tx.set_data(path, data, version)
        return tx.commit_async()

    @staticmethod
    def _raise_if_check_failed(check_result: Any, check_path: str, check_version: int) -> None:
        """A multi's first result is its check op's: True, or RolledBackError when a later op
        failed; anything else is the check's own failure (BadVersionError, NoNodeError)."""
        if isinstance(check_result, Exception) and not isinstance(check_result, RolledBackError):
            raise CheckVersionFailed(check_path, check_version, check_result)

    async def create_many(
        self, creates: Sequence[tuple[str, bytes]], makepath: bool = False, sequence: bool = False
    ) -> list[str | Exception]:
        """Creates ``(path, data)``, pipelined; each created path or its exception (``NodeExistsError``)."""
        return await self._pipelined(
            lambda c: self.client.create_async(c[0], c[1], makepath=makepath, sequence=sequence), creates
        )

    async def delete_many(self, paths: Sequence[str]) -> list[Any]:
        """Deletes, pipelined; each result (True) or its exception (``NoNodeError``)."""
        return await self._pipelined(self.client.delete_async, paths)

    def _bridge(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        loop = self.loop

        def on_kazoo_thread(*args: Any) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(fn, *args)

        return on_kazoo_thread

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> None:
        """``callback(children)`` on the loop now and whenever the children of ``path`` change."""
        self.start_watch(self.client.ChildrenWatch, path, self._bridge(callback))

    def start_watch(self, watch_class: Callable[..., Any], path: str, func: Callable[..., Any]) -> None:
        """Create a kazoo watch off the event loop: its first read is a blocking ZooKeeper call."""
        loop = self.loop
        future = loop.run_in_executor(None, watch_class, path, func)

        def done(f: asyncio.Future[Any]) -> None:
            if not f.cancelled() and f.exception() is not None:
                log.warning("watch on %s failed: %s", path, f.exception())

        future.add_done_callback(done)

    def watch_data(
        self, path: str, callback: Callable[[bytes | None, ZnodeStat | None], Any], persistent: bool = False
    ) -> None:
        """``callback(data, stat)`` on the loop now and on every change; (None, None) while absent.

        Unless ``persistent``, the watch ends once the znode is absent (deleted, or not there yet);
        a persistent watch goes on through deletions and re-creations (``/controller``).
        """
        bridged = self._bridge(callback)

        def on_change(data: bytes | None, stat: ZnodeStat | None, *_: Any) -> bool | None:
            bridged(data, stat)
            return False if stat is None and not persistent else None

        self.start_watch(self.client.DataWatch, path, on_change)

    # -- small typed helpers -------------------------------------------------------------

    async def get_data(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        """The znode's bytes (for a headwater.zk decoder) and stat; None when absent."""
        try:
            data, stat = await self.call(self.client.get, path)
        except NoNodeError:
            return None
        return bytes(data or b""), stat

    async def get_json(self, path: str) -> tuple[Any, ZnodeStat] | None:
        try:
            data, stat = await self.call(self.client.get, path)
        except NoNodeError:
            return None
        return from_json(data), stat

    async def children(self, path: str) -> list[str]:
        try:
            return sorted(await self.call(self.client.get_children, path))
        except NoNodeError:
            return []

    async def create_ephemeral(self, path: str, value: Any) -> bool:
        """True if created, False if the node already exists."""
        try:
            await self.call(self.client.create, path, to_json(value), ephemeral=True, makepath=True)
            return True
        except NodeExistsError:
            return False

    def session_id(self) -> int | None:
        sid = self.client.client_id
        return sid[0] if sid else None

    @staticmethod
    def is_connected(state: str) -> bool:
        return bool(state == KazooState.CONNECTED)
