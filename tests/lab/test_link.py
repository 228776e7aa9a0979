"""The WAN link relay (headwater.lab.link) on its own: delay, jitter without reordering, the bandwidth
cap, cut/heal in both modes, and the control endpoint driven by ``headwater lab link``."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

import pytest

from headwater.cli.main import main
from headwater.lab.link import Link, LinkSettings, LinkThread


async def _echo_server() -> tuple[asyncio.Server, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1])


def _run(settings: LinkSettings, body: Callable[[Link, int], Awaitable[None]]) -> None:
    """``body(link, port)`` with a link in front of an echo server."""

    async def main_() -> None:
        server, target = await _echo_server()
        link = Link("dcX", settings)
        try:
            port = await link.add_route("127.0.0.1", target)
            await asyncio.wait_for(body(link, port), 120)
        finally:
            await link.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main_())


async def _round_trip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes) -> float:
    start = time.monotonic()
    writer.write(payload)
    await writer.drain()
    assert await reader.readexactly(len(payload)) == payload
    return time.monotonic() - start


def test_delay_applies_each_way_and_jitter_never_reorders() -> None:
    async def body(link: Link, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        rtts = [await _round_trip(reader, writer, b"ping %d" % i) for i in range(5)]
        # 30 ms out, 30 ms back: nothing arrives sooner
        assert min(rtts) >= 0.060, rtts
        link.configure(delay_ms=0, jitter_ms=20)
        # many small writes, each delayed by its own draw: the bytes still arrive in order
        sent = b"".join(b"%06d," % i for i in range(2000))
        for i in range(0, len(sent), 7):
            writer.write(sent[i : i + 7])
            await asyncio.sleep(0)
        await writer.drain()
        assert await reader.readexactly(len(sent)) == sent
        writer.close()

    _run(LinkSettings(delay_ms=30), body)


def test_bandwidth_is_capped_per_direction() -> None:
    n = 1_000_000  # 8 Mbit at 16 Mbit/s: at least 0.5 s to get there (coming back overlaps)

    async def body(link: Link, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        elapsed = await _round_trip(reader, writer, bytes(n))
        assert elapsed >= (n - 65536) * 8 / 16e6, elapsed
        status = link.status()
        assert status["bytes_to_target"] == n and status["bytes_to_client"] == n
        link.configure(bandwidth_mbit=0)
        fast = await _round_trip(reader, writer, bytes(n))
        assert fast < elapsed, (fast, elapsed)
        writer.close()

    _run(LinkSettings(bandwidth_mbit=16), body)


def test_cut_drops_connections_and_refuses_new_ones_until_heal() -> None:
    async def body(link: Link, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await _round_trip(reader, writer, b"before")
        assert link.cut() == 1
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            writer.write(b"during")
            await writer.drain()
            await reader.readexactly(6)
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)  # accepted, then aborted at once
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            w2.write(b"x")
            await w2.drain()
            await r2.readexactly(1)
        assert link.status()["state"] == "cut (drop)"
        link.heal()
        r3, w3 = await asyncio.open_connection("127.0.0.1", port)
        await _round_trip(r3, w3, b"after")
        w3.close()
        assert link.status()["routes"][0]["refused"] == 1

    _run(LinkSettings(delay_ms=5), body)


def test_blackhole_holds_bytes_and_connects_until_heal() -> None:
    async def body(link: Link, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await _round_trip(reader, writer, b"before")
        assert link.cut("blackhole") == 0
        writer.write(b"held")
        await writer.drain()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readexactly(4), 0.5)
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        w2.write(b"new")
        await w2.drain()
        link.heal()
        # the same connections carry on: nothing was lost, only late
        assert await asyncio.wait_for(reader.readexactly(4), 10) == b"held"
        assert await asyncio.wait_for(r2.readexactly(3), 10) == b"new"
        writer.close()
        w2.close()

    _run(LinkSettings(), body)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="delay_ms"):
        LinkSettings(delay_ms=-1)
    with pytest.raises(ValueError, match="cut mode"):
        Link("x").cut("sometimes")


def test_lab_link_cli_cuts_heals_and_sets_a_running_link(capsys: pytest.CaptureFixture[str]) -> None:
    with LinkThread("dc2", LinkSettings(delay_ms=1)) as link:
        control = f"127.0.0.1:{link.serve_control()}"
        assert main(["lab", "link", "cut", "dc2", "--control", control]) == 0
        assert link.status()["state"] == "cut (drop)"
        capsys.readouterr()
        assert main(["lab", "link", "status", "dc2", "--control", control]) == 0
        assert json.loads(capsys.readouterr().out)["state"] == "cut (drop)"
        assert main(["lab", "link", "heal", "dc2", "--control", control]) == 0
        assert link.status()["state"] == "up"
        assert main(["lab", "link", "set", "dc2", "--control", control, "--delay-ms", "80"]) == 0
        assert link.status()["settings"]["delay_ms"] == 80
        capsys.readouterr()
        # the wrong link's name is refused: a cut meant for dc1 must not cut dc2
        assert main(["lab", "link", "cut", "dc1", "--control", control]) == 1
        assert "not 'dc1'" in capsys.readouterr().err
        assert link.status()["state"] == "up"
