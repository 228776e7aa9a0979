"""The controller's ZooKeeper batching (issue 26), against a real ZooKeeper: its state writes in
multis, each guarded by the controller epoch znode's version (ZooKeeper.set_many_checked), and its
state reads with multiRead (ZooKeeper.get_many(small=True))."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from headwater.broker import zk as zkmod
from headwater.broker.zk import CheckVersionFailed, ZooKeeper, to_json
from headwater.broker.zk_multi_read import MultiRead, MultiReadDecodeError, server_version
from headwater.zk.paths import partition_state_path

EPOCH = "/controller_epoch"


def state(leader: int, leader_epoch: int) -> bytes:
    return to_json({"controller_epoch": 1, "leader": leader, "version": 1, "leader_epoch": leader_epoch, "isr": [1, 2]})


def run_with_zk(zk_connect: str, body: Callable[[ZooKeeper], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        zk = ZooKeeper(zk_connect, 6000, 30000)
        await zk.start()
        try:
            return await body(zk)
        finally:
            await zk.stop()

    return asyncio.run(main())


async def make_states(zk: ZooKeeper, count: int) -> tuple[list[str], int]:
    """``count`` partition states at version 0 and the controller epoch znode; (paths, epoch version)."""
    paths = [partition_state_path(f"t{i // 10}", i % 10) for i in range(count)]
    created = await zk.create_many([(p, state(1, 0)) for p in paths], makepath=True)
    assert all(c == p for c, p in zip(created, paths, strict=True))
    await zk.call(zk.client.create, EPOCH, b"1")
    return paths, 0


class CommitCounter:
    """Counts the multis sent (wraps the real ``_commit_checked``; ZooKeeper still answers them)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        real = ZooKeeper._commit_checked

        def counting(zk: ZooKeeper, writes: Any, batch: list[int], path: str, version: int) -> Any:
            self.sizes.append(len(batch))
            return real(zk, writes, batch, path, version)

        monkeypatch.setattr(ZooKeeper, "_commit_checked", counting)


def test_thousands_of_writes_go_out_in_a_few_multis(zk_connect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zkmod, "MULTI_MAX_OPS", 100)
    commits = CommitCounter(monkeypatch)

    async def body(zk: ZooKeeper) -> None:
        paths, epoch_version = await make_states(zk, 1050)
        results = await zk.set_many_checked([(p, state(2, 1), 0) for p in paths], EPOCH, epoch_version)
        assert all(isinstance(r, ZnodeStat) and r.version == 1 for r in results)
        assert commits.sizes == [100] * 10 + [50]  # 11 multis, no write sent alone
        for got in await zk.get_many(paths):
            assert got is not None and got[0]["leader"] == 2 and got[1].version == 1

    run_with_zk(zk_connect, body)


def test_a_conflicting_write_fails_alone_and_the_rest_of_its_multi_is_applied(
    zk_connect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader changed one partition's ISR since the controller read it: ZooKeeper rejects that
    write's whole multi; each of its writes is retried alone, so only that one fails (BADVERSION,
    for the caller to re-read) and the leader's change is not overwritten."""
    monkeypatch.setattr(zkmod, "MULTI_MAX_OPS", 20)
    commits = CommitCounter(monkeypatch)

    async def body(zk: ZooKeeper) -> None:
        paths, epoch_version = await make_states(zk, 60)
        leaders_write = to_json({"leader": 1, "leader_epoch": 0, "isr": [1], "controller_epoch": 1, "version": 1})
        await zk.call(zk.client.set, paths[25], leaders_write, version=0)  # in the second multi
        await zk.call(zk.client.delete, paths[47])  # a deleted topic's partition, in the third
        results = await zk.set_many_checked([(p, state(2, 1), 0) for p in paths], EPOCH, epoch_version)
        assert isinstance(results[25], BadVersionError)
        assert isinstance(results[47], NoNodeError)
        ok = [i for i in range(60) if i not in (25, 47)]
        assert all(isinstance(results[i], ZnodeStat) for i in ok)
        # three multis, then the 40 writes of the two rejected ones one by one
        assert commits.sizes == [20, 20, 20] + [1] * 40
        got = await zk.get_many(paths)
        assert got[25] is not None and got[25][0]["isr"] == [1] and got[25][1].version == 1  # the leader's
        assert got[47] is None
        for i in ok:
            entry = got[i]
            assert entry is not None and entry[0]["leader"] == 2 and entry[1].version == 1

    run_with_zk(zk_connect, body)


def test_a_newer_controller_epoch_fences_every_write(zk_connect: str) -> None:
    """Another controller was elected (the epoch znode moved): nothing is written, and the caller
    learns it must resign."""

    async def body(zk: ZooKeeper) -> None:
        paths, epoch_version = await make_states(zk, 30)
        await zk.call(zk.client.set, EPOCH, b"2", version=epoch_version)  # the successor's election
        with pytest.raises(CheckVersionFailed) as failed:
            await zk.set_many_checked([(p, state(2, 1), 0) for p in paths], EPOCH, epoch_version)
        assert failed.value.path == EPOCH and failed.value.expected_version == epoch_version
        for got in await zk.get_many(paths):
            assert got is not None and got[0]["leader"] == 1 and got[1].version == 0

    run_with_zk(zk_connect, body)


def test_the_fence_is_checked_in_the_one_by_one_fallback_too(zk_connect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The epoch moves between the multi that conflicted and its writes' retries: the retries
    are fenced as well."""
    real = ZooKeeper._commit_checked
    moved: list[bool] = []

    def epoch_moves_before_the_retries(zk: ZooKeeper, writes: Any, batch: list[int], path: str, version: int) -> Any:
        if len(batch) == 1 and not moved:
            zk.client.set(EPOCH, b"2", version=version)  # kazoo's thread answers it before the retries
            moved.append(True)
        return real(zk, writes, batch, path, version)

    monkeypatch.setattr(ZooKeeper, "_commit_checked", epoch_moves_before_the_retries)

    async def body(zk: ZooKeeper) -> None:
        paths, epoch_version = await make_states(zk, 10)
        await zk.call(zk.client.set, paths[3], state(1, 0), version=0)  # a conflict: fallback
        with pytest.raises(CheckVersionFailed):
            await zk.set_many_checked([(p, state(2, 1), 0) for p in paths], EPOCH, epoch_version)
        for got in await zk.get_many(paths):
            assert got is not None and got[0]["leader"] == 1

    run_with_zk(zk_connect, body)


def test_multis_stay_far_below_jute_maxbuffer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large states (long topic names, big ISRs) cut a multi by bytes before its op count."""
    monkeypatch.setattr(zkmod, "MULTI_MAX_OPS", 10_000)
    writes = [(partition_state_path("t" * 249, i), b"x" * 2000, 0) for i in range(1000)]
    batches = zkmod._multi_batches(writes)
    assert [i for b in batches for i in b] == list(range(1000))
    for b in batches:
        size = sum(zkmod._MULTI_OP_OVERHEAD + len(writes[i][0]) + len(writes[i][1]) for i in b)
        assert size <= zkmod.MULTI_MAX_BYTES < 1024 * 1024
    assert len(batches) == 5
    # a single write larger than the limit still goes out (alone): ZooKeeper decides
    assert zkmod._multi_batches([("/a", b"x" * (zkmod.MULTI_MAX_BYTES + 1), 0), ("/b", b"", 0)]) == [[0], [1]]


def test_multi_read_answers_as_the_pipelined_reads(zk_connect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """get_many(small=True) reads with multiRead (this ZooKeeper is 3.8), in requests of
    MULTI_READ_MAX_OPS, and answers exactly what one read per znode answers: values, stats,
    None for a missing znode, under the test's chroot."""
    monkeypatch.setattr(zkmod, "MULTI_READ_MAX_OPS", 40)
    sent: list[int] = []
    real = MultiRead.serialize

    def counting(self: MultiRead) -> bytearray:
        sent.append(len(self.paths))
        return real(self)

    monkeypatch.setattr(MultiRead, "serialize", counting)

    async def body(zk: ZooKeeper) -> None:
        paths, _ = await make_states(zk, 100)
        await zk.call(zk.client.set, paths[7], state(3, 9), version=0)
        await zk.call(zk.client.create, "/empty", b"")  # a znode without data
        wanted = [*paths, partition_state_path("missing", 0), "/empty"]
        one_by_one = await zk.get_many(wanted)
        assert not sent
        batched = await zk.get_many(wanted, small=True)
        assert sent == [40, 40, 22]
        assert batched == one_by_one
        assert batched[7] is not None and batched[7][0]["leader"] == 3 and batched[7][1].version == 1
        assert batched[100] is None
        assert batched[101] is not None and batched[101][0] is None

    run_with_zk(zk_connect, body)


def test_no_multi_read_to_a_server_that_does_not_say_it_has_it(
    zk_connect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server older than 3.6 closes the connection on multiRead's unknown opcode: it is sent
    only when ``srvr`` names 3.6 or newer; otherwise the reads go one request each."""
    answers = [
        "Zookeeper version: 3.5.9-83df9301aa5c2a5d284a9940177808c01bc35cef, built on 01/06/2021 20:03 GMT\nMode: standalone\n",
        "srvr is not executed because it is not in the whitelist.\n",
    ]
    sent: list[int] = []
    real = MultiRead.serialize
    monkeypatch.setattr(MultiRead, "serialize", lambda self: sent.append(1) or real(self))

    async def body(zk: ZooKeeper) -> None:
        paths, _ = await make_states(zk, 20)
        for answer in answers:
            zk._multi_read_ok = None
            monkeypatch.setattr(zk.client, "command", lambda cmd, a=answer: a)
            got = await zk.get_many(paths, small=True)
            assert all(g is not None and g[0]["leader"] == 1 for g in got)
        assert not sent

    run_with_zk(zk_connect, body)


def test_server_version_from_srvr() -> None:
    assert server_version("Zookeeper version: 3.8.0-5a02a05eddb59aee6ac762f7ea82e92a68eb9c0f, built on ...") == (
        3,
        8,
        0,
    )
    assert server_version("Zookeeper version: 3.4.14-4c25d480e66aadd371de8bd2fd8da255ac140bcf, built on") == (3, 4, 14)
    assert server_version("srvr is not executed because it is not in the whitelist.") is None
    assert server_version("") is None


def test_a_truncated_multi_read_response_is_one_typed_error() -> None:
    stat = bytes(68)
    whole = (
        struct.pack(">i?i", 4, False, 0)
        + struct.pack(">i", 2)
        + b"{}"
        + stat
        + struct.pack(">i?i", -1, False, -101)
        + struct.pack(">i", -101)
        + struct.pack(">i?i", -1, True, -1)
    )
    results = MultiRead.deserialize(whole, 0)
    assert results[0] == (b"{}", ZnodeStat._make([0] * 11)) and isinstance(results[1], NoNodeError)
    for cut in range(len(whole) - 1):
        with pytest.raises(MultiReadDecodeError):
            MultiRead.deserialize(whole[:cut], 0)
