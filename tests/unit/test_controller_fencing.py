"""A controller whose epoch moved (a zombie: another controller was elected) writes no partition
state and resigns, as Kafka 2.x's ControllerMovedException (issue 26 put the controller's state
writes into ZooKeeper multis guarded by /controller_epoch's version). A real ZooKeeper; the broker
around the controller is the few services it reaches (ControllerHost)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from headwater.broker.config import config_from_props
from headwater.broker.controller.controller import Controller
from headwater.broker.metadata_cache import MetadataCache
from headwater.broker.metrics import BrokerMetrics
from headwater.broker.zk import ZooKeeper, to_json
from headwater.zk import paths as zkpaths
from headwater.zk.paths import partition_state_path


async def until(condition: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("trigger", ["event", "controlled_shutdown"])
def test_a_controller_whose_epoch_moved_writes_nothing_and_resigns(
    zk_connect: str, caplog: pytest.LogCaptureFixture, trigger: str
) -> None:
    """``event``: a state change on the controller's event queue; ``controlled_shutdown``: a
    ControlledShutdown request, which then gets NOT_CONTROLLER (None) for the broker to retry."""
    caplog.set_level(logging.WARNING, logger="headwater.broker.controller.controller")

    async def main() -> None:
        zk = ZooKeeper(zk_connect, 6000, 30000)
        await zk.start()
        try:
            # brokers 1 and 3 are alive; t-0 and t-1 are led by broker 2, which is not
            for b in (1, 3):
                registration = {"version": 4, "endpoints": [f"PLAINTEXT://127.0.0.1:{b}"]}
                await zk.call(zk.client.create, zkpaths.broker_path(b), to_json(registration))
            await zk.call(
                zk.client.create,
                zkpaths.topic_path("t"),
                to_json({"version": 1, "partitions": {"0": [2, 1, 3], "1": [2, 1, 3]}}),
            )
            paths = [partition_state_path("t", p) for p in (0, 1)]
            state = {"controller_epoch": 1, "leader": 2, "version": 1, "leader_epoch": 0, "isr": [2, 1, 3]}
            await zk.create_many([(p, to_json(state)) for p in paths], makepath=True)

            host = SimpleNamespace(
                broker_id=1,
                config=config_from_props({"zookeeper.connect": zk_connect, "broker.id": "1"}),
                cache=MetadataCache(zk),
                metrics=BrokerMetrics(),
                zk=zk,
                stopping=asyncio.Event(),
            )
            controller = Controller(host)  # type: ignore[arg-type]
            controller.start()
            try:
                # elected: both partitions get broker 1 as leader through the guarded multi
                async def elected() -> bool:
                    got = await zk.get_many(paths)
                    return all(g is not None and g[0]["leader"] == 1 for g in got)

                for _ in range(1200):
                    if controller.active and await elected():
                        break
                    await asyncio.sleep(0.05)
                assert controller.active and await elected()
                before = await zk.get_many(paths)

                # another broker's election moves the epoch (its transaction), unseen by this one yet
                await zk.call(zk.client.set, zkpaths.CONTROLLER_EPOCH, b"99", version=controller.epoch_zk_version)

                async def move_leadership() -> None:
                    await controller._change_states(
                        {("t", p): lambda cur: cur.new_leader(1, cur.isr, controller.epoch) for p in (0, 1)}
                    )

                if trigger == "event":
                    controller.enqueue(move_leadership)
                else:
                    assert await controller.controlled_shutdown(1, -1) is None  # would move t-0, t-1 to 3
                await until(lambda: not controller.active, "the zombie controller resigned")
                assert await zk.get_many(paths) == before  # nothing written at the old epoch
                assert any("controller moved" in r.getMessage() for r in caplog.records)
            finally:
                await controller.stop()
        finally:
            await zk.stop()

    asyncio.run(main())
