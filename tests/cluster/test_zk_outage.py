"""Every ZooKeeper client heals after an outage (issue 38, item 1).

ZooKeeper is cut off (every connection of the source side closed, new ones refused) under three
brokers, a ZooKeeper consumer group of two members and the mirror, for longer than every session
timeout: every session expires, every registration, the controller and the group's ids and owners
are gone. Within 30 s of ZooKeeper's return every broker is registered again, an acks=all write to
every partition succeeds, the group owns every partition again and the mirror has copied every
record (those written after the outage included).

The drill is the bench scenario's (``headwater bench --only zk-outage``: a 7-minute outage); here
the outage lasts :data:`OUTAGE_S`, several session timeouts.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headwater.bench.scenarios.zk_outage import HEAL_GOAL_S, MEASURES, QUICK_OUTAGE_S, OutageDrill
from headwater.testing.zookeeper import ZooKeeperServer

OUTAGE_S = float(os.environ.get("HEADWATER_ZK_OUTAGE_S", QUICK_OUTAGE_S))


@pytest.mark.slow
def test_every_zookeeper_client_heals_after_an_outage(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    with OutageDrill(tmp_path, zookeeper.connect, f"/outage{os.getpid()}") as drill:
        times = drill.run(OUTAGE_S, limit_s=HEAL_GOAL_S * 3)
        print(times.describe())
        late = {m: getattr(times, m) for m in MEASURES if getattr(times, m) is None or getattr(times, m) > HEAL_GOAL_S}
        assert not late, f"not healed within {HEAL_GOAL_S:.0f} s of ZooKeeper's return: {times.describe()}"
