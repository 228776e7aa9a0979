"""A WAN link between a datacenter and the aggregate side, emulated in user space (a test and lab fixture).

The kernel here has no ``netem`` qdisc, so a link is a TCP relay: each *route* listens on a port and
forwards every accepted connection to one target ``host:port`` (a broker's ``WAN`` listener, a
ZooKeeper). All routes of a link share its settings and its state:

one-way delay and jitter
    Every chunk read from one side is written to the other ``delay_ms`` (+ a uniform draw in
    ``[0, jitter_ms]``) after it was read. Within one connection and direction the delivery times
    never go backwards, so jitter delays bytes but never reorders them (TCP would not either).
bandwidth cap
    Per direction, shared by all the link's connections: a chunk of ``n`` bytes occupies the wire
    for ``n * 8 / bandwidth`` seconds after the previous chunk left it (a serialisation queue), and
    is delivered ``delay`` after it finished. ``bandwidth_mbit = 0`` means unlimited.
in-flight bound
    At most ``buffer_bytes`` read but not yet delivered per connection and direction (the socket
    buffers a real path would have); the relay stops reading from a side that is that far ahead,
    so back-pressure reaches the sender as it would through TCP.
cut and heal
    ``cut("drop")``: every connection of the link is aborted (RST) and new ones are accepted and
    aborted at once until :meth:`Link.heal`. ``cut("blackhole")``: nothing moves any more, in either
    direction, on existing or new connections (bytes stay queued, connects stay pending); ``heal``
    lets everything continue where it stopped, as TCP retransmission would after a short outage.

Threading: a :class:`Link` lives on one asyncio loop. Tests that drive it from synchronous code use
:class:`LinkThread` (a link on its own loop in a daemon thread, with blocking methods). The lab runs
``headwater lab link serve`` (:func:`serve`): one link and its control endpoint, a tiny HTTP/1.0 API
that ``headwater lab link cut|heal|status|set`` calls::

    GET  /status                      -> the link's settings, state and counters (JSON)
    POST /cut?link=dc2&mode=drop      -> {"closed": <connections aborted>, ...status}
    POST /heal?link=dc2
    POST /set?link=dc2&delay_ms=80&jitter_ms=5&bandwidth_mbit=50

``link=`` must name this link (a cut sent to the wrong DC's service is refused with 404).

Browsers (review security-2026-11-26, L6): the endpoint listens on the operator's machine, and any
web page the operator visits could otherwise cut the lab's links with a cross-site form or a no-cors
``fetch`` (both "simple" requests a browser sends without asking). So the endpoint answers 403 to any
request carrying ``Origin`` or ``Referer`` (browsers add them to cross-site requests and to every
POST; :func:`control_request` never does), and to a POST without the ``X-Headwater-Lab`` header,
which a form cannot set and a cross-origin ``fetch`` could only send after a CORS preflight
(``OPTIONS``) that is refused too. A plain ``GET /status`` (the compose health check) stays open.
This defends against browsers, not against local processes: anything that can open a socket to the
port can still cut the link (the lab binds it to 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, TypeVar

__all__ = ["CONTROL_HEADER", "CUT_MODES", "Link", "LinkSettings", "LinkThread", "serve", "serve_control"]

log = logging.getLogger("headwater.lab.link")

CUT_MODES = ("drop", "blackhole")
#: the request header headwater's own client sends with every control request (see the module docstring)
CONTROL_HEADER = "X-Headwater-Lab"
_CHUNK = 64 * 1024
_T = TypeVar("_T")


@dataclass(frozen=True)
class LinkSettings:
    delay_ms: float = 0.0  # one way
    jitter_ms: float = 0.0  # uniform extra delay in [0, jitter_ms], order kept
    bandwidth_mbit: float = 0.0  # per direction, all connections together; 0: unlimited
    buffer_bytes: int = 8 * 1024 * 1024  # read but not delivered, per connection and direction

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) < 0:
                raise ValueError(f"{f.name} must not be negative (got {getattr(self, f.name)})")
        if self.buffer_bytes < _CHUNK:
            raise ValueError(f"buffer_bytes must be at least {_CHUNK}")


class _Wire:
    """One direction of the link: when does a chunk of ``n`` bytes read at ``now`` arrive?"""

    def __init__(self) -> None:
        self.busy_until = 0.0
        self.bytes = 0

    def arrival(self, now: float, n: int, s: LinkSettings, rng: random.Random) -> float:
        self.bytes += n
        sent = now
        if s.bandwidth_mbit > 0:
            sent = max(now, self.busy_until) + n * 8 / (s.bandwidth_mbit * 1e6)
            self.busy_until = sent
        return sent + (s.delay_ms + (rng.uniform(0, s.jitter_ms) if s.jitter_ms else 0.0)) / 1000.0


@dataclass
class _Route:
    name: str
    target_host: str
    target_port: int
    server: asyncio.Server | None = None
    listen_port: int = 0
    accepted: int = 0
    refused: int = 0
    failed: int = 0


class _Conn:
    def __init__(self, route: _Route, client: asyncio.StreamWriter) -> None:
        self.route = route
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.closed = False

    def abort(self) -> None:
        self.closed = True
        self.client.transport.abort()
        if self.upstream is not None:
            self.upstream.transport.abort()

    def close(self) -> None:
        self.closed = True
        self.client.close()
        if self.upstream is not None:
            self.upstream.close()


class Link:
    """A named WAN link: routes sharing one set of settings, one wire per direction, one cut state."""

    def __init__(
        self,
        name: str,
        settings: LinkSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self.settings = settings or LinkSettings()
        self.clock = clock
        self.rng = rng or random.Random()
        self.cut_mode: str | None = None
        self.cuts = 0
        self._open = asyncio.Event()
        self._open.set()
        self._routes: dict[str, _Route] = {}
        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._wires = {"to_target": _Wire(), "to_client": _Wire()}

    # -- routes -------------------------------------------------------------------------------

    async def add_route(
        self,
        target_host: str,
        target_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        name: str = "",
    ) -> int:
        """Listen on ``listen_host:listen_port`` (0: a free port) and relay to the target; the port."""
        route = _Route(name or f"{target_host}:{target_port}", target_host, target_port)
        if route.name in self._routes:
            raise ValueError(f"link {self.name}: route {route.name!r} already exists")

        async def on_accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await self._handle(route, reader, writer)
            except asyncio.CancelledError:  # close() gave up waiting for it
                writer.transport.abort()

        route.server = await asyncio.start_server(on_accept, listen_host, listen_port)
        route.listen_port = int(route.server.sockets[0].getsockname()[1])
        self._routes[route.name] = route
        log.info(
            "link %s: %s:%d -> %s:%d", self.name, listen_host, route.listen_port, route.target_host, route.target_port
        )
        return route.listen_port

    # -- faults and settings ------------------------------------------------------------------

    def cut(self, mode: str = "drop") -> int:
        """Cut the link (see the module docstring); the number of connections aborted."""
        if mode not in CUT_MODES:
            raise ValueError(f"cut mode {mode!r} is not one of {', '.join(CUT_MODES)}")
        self.cut_mode = mode
        self.cuts += 1
        closed = 0
        if mode == "drop":
            for conn in list(self._conns):
                if not conn.closed:
                    conn.abort()
                    closed += 1
        else:
            self._open.clear()
        log.warning("link %s: cut (%s): %d connection(s) aborted", self.name, mode, closed)
        return closed

    def heal(self) -> None:
        if self.cut_mode is not None:
            log.warning("link %s: healed", self.name)
        self.cut_mode = None
        self._open.set()

    def configure(self, **changes: float) -> LinkSettings:
        """Change settings on the fly (``delay_ms=80``); chunks already read keep their arrival time."""
        self.settings = replace(self.settings, **changes)  # type: ignore[arg-type]
        log.info("link %s: %s", self.name, self.settings)
        return self.settings

    def status(self) -> dict[str, Any]:
        return {
            "link": self.name,
            "state": "up" if self.cut_mode is None else f"cut ({self.cut_mode})",
            "settings": asdict(self.settings),
            "connections": sum(1 for c in self._conns if not c.closed),
            "cuts": self.cuts,
            "bytes_to_target": self._wires["to_target"].bytes,
            "bytes_to_client": self._wires["to_client"].bytes,
            "routes": [
                {
                    "name": r.name,
                    "listen_port": r.listen_port,
                    "target": f"{r.target_host}:{r.target_port}",
                    "accepted": r.accepted,
                    "refused": r.refused,
                    "failed": r.failed,
                }
                for r in self._routes.values()
            ],
        }

    async def close(self) -> None:
        """Stop listening, abort every connection, wait for every relay task."""
        for r in self._routes.values():
            if r.server is not None:
                r.server.close()
        for conn in list(self._conns):
            conn.abort()
        self._open.set()
        if self._tasks:  # aborted connections end their relays; cancel only what still hangs
            _, hanging = await asyncio.wait(set(self._tasks), timeout=5)
            for t in hanging:
                t.cancel()
            await asyncio.gather(*hanging, return_exceptions=True)
        for r in self._routes.values():
            if r.server is not None:
                await r.server.wait_closed()

    # -- relaying -----------------------------------------------------------------------------

    async def _handle(self, route: _Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = _Conn(route, writer)
        self._conns.add(conn)
        try:
            if self.cut_mode == "drop":
                route.refused += 1
                conn.abort()
                return
            await self._open.wait()  # a blackhole holds the connect until heal
            try:
                up_reader, upstream = await asyncio.wait_for(
                    asyncio.open_connection(route.target_host, route.target_port), 10.0
                )
                conn.upstream = upstream
            except (OSError, TimeoutError) as e:
                route.failed += 1
                log.info("link %s: route %s: cannot reach the target: %s", self.name, route.name, e)
                conn.abort()
                return
            if conn.closed or self.cut_mode == "drop":  # cut while connecting
                route.refused += 1
                conn.abort()
                return
            route.accepted += 1
            await asyncio.gather(
                self._pump(conn, reader, upstream, self._wires["to_target"]),
                self._pump(conn, up_reader, writer, self._wires["to_client"]),
            )
        finally:
            if not conn.closed:
                conn.close()
            self._conns.discard(conn)
            self._tasks.discard(task)

    async def _pump(self, conn: _Conn, src: asyncio.StreamReader, dst: asyncio.StreamWriter, wire: _Wire) -> None:
        """Read from ``src`` as the in-flight bound allows; write each chunk at its arrival time."""
        queue: deque[tuple[float, bytes]] = deque()
        queued = [0]
        has_data, has_room = asyncio.Event(), asyncio.Event()
        eof = [False]

        async def read() -> None:
            last = 0.0
            try:
                while not conn.closed:
                    while queued[0] >= self.settings.buffer_bytes and not conn.closed:
                        has_room.clear()
                        await has_room.wait()
                    await self._open.wait()
                    data = await src.read(_CHUNK)
                    if not data or conn.closed:
                        break
                    last = max(last, wire.arrival(self.clock(), len(data), self.settings, self.rng))
                    queue.append((last, data))
                    queued[0] += len(data)
                    has_data.set()
            except OSError:
                conn.abort()
            finally:
                eof[0] = True
                has_data.set()

        async def write() -> None:
            try:
                while not conn.closed:
                    if not queue:
                        if eof[0]:
                            return
                        has_data.clear()
                        await has_data.wait()
                        continue
                    at, data = queue[0]
                    wait = at - self.clock()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    await self._open.wait()
                    if conn.closed:
                        return
                    queue.popleft()
                    queued[0] -= len(data)
                    has_room.set()
                    dst.write(data)
                    await dst.drain()
            except OSError:
                conn.abort()
            finally:
                conn.close()  # the other side's reader sees the end too
                has_room.set()

        await asyncio.gather(read(), write())


class LinkThread:
    """A :class:`Link` on its own event loop in a daemon thread, driven by blocking calls (tests)::

    with LinkThread("dc2", LinkSettings(delay_ms=20)) as link:
        port = link.add_route("127.0.0.1", broker_port)
        link.cut(); link.heal()
    """

    def __init__(self, name: str, settings: LinkSettings | None = None, *, call_timeout: float = 30.0) -> None:
        self.name = name
        self._settings = settings
        self.call_timeout = call_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._link: Link | None = None
        self._control: asyncio.Server | None = None

    def start(self) -> LinkThread:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name=f"link-{self.name}", daemon=True)
        self._thread.start()

        async def make() -> Link:
            return Link(self.name, self._settings)

        self._link = self._run(make())
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:

            async def close() -> None:
                if self._control is not None:
                    self._control.close()
                    await self._control.wait_closed()
                assert self._link is not None
                await self._link.close()

            self._run(close())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(self.call_timeout)
            loop.close()
            self._loop = None

    def __enter__(self) -> LinkThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def link(self) -> Link:
        assert self._link is not None, "not started"
        return self._link

    def add_route(self, target_host: str, target_port: int, *, name: str = "") -> int:
        return self._run(self.link.add_route(target_host, target_port, name=name))

    def serve_control(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Start the HTTP control endpoint (as ``headwater lab link serve`` does); its port."""
        self._control = self._run(serve_control(self.link, host, port))
        return int(self._control.sockets[0].getsockname()[1])

    def cut(self, mode: str = "drop") -> int:
        return self._call(lambda: self.link.cut(mode))

    def heal(self) -> None:
        self._call(self.link.heal)

    def configure(self, **changes: float) -> LinkSettings:
        return self._call(lambda: self.link.configure(**changes))

    def status(self) -> dict[str, Any]:
        return self._call(self.link.status)

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        assert self._loop is not None, "not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self.call_timeout)

    def _call(self, fn: Callable[[], _T]) -> _T:
        async def run() -> _T:
            return fn()

        return self._run(run())


# -- the control endpoint --------------------------------------------------------------------------


def _browser_refusal(method: str, headers: dict[str, str]) -> str | None:
    """Why a control request looks like it came from a web page (None: it does not)."""
    for name in ("origin", "referer"):
        if name in headers:
            return (
                f"refused: the request carries {name.title()}: {headers[name][:100]!r}, so a web page sent it; "
                "use headwater lab link"
            )
    if method != "GET" and CONTROL_HEADER.lower() not in headers:
        return f"refused: {method} without the {CONTROL_HEADER} header; use headwater lab link"
    return None


def _control_answer(
    link: Link, method: str, target: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    refusal = _browser_refusal(method, headers or {})
    if refusal is not None:
        log.warning("link %s: control request %s %s %s", link.name, method, target[:100], refusal)
        return 403, {"error": refusal}
    url = urllib.parse.urlsplit(target)
    q = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
    if url.path == "/status" and method == "GET":
        return 200, link.status()
    if url.path not in ("/cut", "/heal", "/set") or method != "POST":
        return 404, {"error": "try GET /status, POST /cut, /heal or /set"}
    if q.get("link") != link.name:
        return 404, {"error": f"this is link {link.name!r}, not {q.get('link')!r}"}
    try:
        if url.path == "/cut":
            closed = link.cut(q.get("mode", "drop"))
            return 200, {"closed": closed, **link.status()}
        if url.path == "/heal":
            link.heal()
            return 200, link.status()
        names = {f.name for f in fields(LinkSettings)}
        changes = {k: float(v) for k, v in q.items() if k != "link"}
        unknown = sorted(set(changes) - names)
        if unknown:
            return 400, {"error": f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}"}
        if "buffer_bytes" in changes:
            changes["buffer_bytes"] = int(changes["buffer_bytes"])
        link.configure(**changes)
        return 200, link.status()
    except ValueError as e:
        return 400, {"error": str(e)}


async def serve_control(link: Link, host: str, port: int) -> asyncio.Server:
    """The link's HTTP/1.0 control endpoint (see the module docstring)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = (await asyncio.wait_for(reader.readline(), 10)).decode("latin-1").split()
            headers: dict[str, str] = {}
            for _ in range(100):  # header lines; more than 100 is not headwater's client
                line = await asyncio.wait_for(reader.readline(), 10)
                if line in (b"\r\n", b"\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            method, target = (request[0], request[1]) if len(request) >= 2 else ("GET", "/")
            code, body = _control_answer(link, method, target, headers)
            payload = json.dumps(body).encode()
            reason = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found"}[code]
            writer.write(
                f"HTTP/1.0 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}"
                f"\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
        except (OSError, TimeoutError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)


async def serve(
    name: str,
    settings: LinkSettings,
    routes: list[tuple[str, int, str, int]],
    control: tuple[str, int],
    stop: asyncio.Event,
) -> None:
    """``headwater lab link serve``: one link with its routes ``(listen_host, listen_port, target_host,
    target_port)`` and its control endpoint, until ``stop`` is set."""
    link = Link(name, settings)
    server = None
    try:
        for listen_host, listen_port, target_host, target_port in routes:
            await link.add_route(target_host, target_port, listen_host=listen_host, listen_port=listen_port)
        server = await serve_control(link, *control)
        log.info("link %s: control on http://%s:%d/status; %s", name, control[0], control[1], settings)
        await stop.wait()
    finally:
        if server is not None:
            server.close()
            await server.wait_closed()
        await link.close()


def control_request(address: str, method: str, path: str, timeout: float = 10.0) -> tuple[int, dict[str, Any]]:
    """One call to a link's control endpoint (``host:port``); ``(HTTP status, JSON body)``."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(f"http://{address}{path}", method=method, headers={CONTROL_HEADER: "link"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
