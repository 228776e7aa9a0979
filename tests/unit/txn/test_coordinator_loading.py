"""The transaction coordinator's ownership of __transaction_state partitions (no broker: a host
that answers the few calls loading makes)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from headwater.broker.txn.coordinator import TransactionCoordinator


class _EmptyLog:
    log_start_offset = 0
    log_end_offset = 0


def _host() -> Any:
    metrics = SimpleNamespace(open_transactions=SimpleNamespace(set_function=lambda f: None))
    replicas = SimpleNamespace(leader_partition=lambda topic, p: (None, _EmptyLog()))
    return SimpleNamespace(
        broker_id=0,
        config=SimpleNamespace(transaction_state_log_num_partitions=50),
        cache=SimpleNamespace(topics={}),
        replicas=replicas,
        metrics=metrics,
    )


def test_a_newer_leader_epoch_during_a_load_is_the_coordinator_epoch() -> None:
    """LeaderAndIsr at epoch 1, then at epoch 2 before the load of epoch 1 ran: the partition is
    owned at epoch 2 (its markers must not carry the older coordinator epoch)."""

    async def run() -> dict[int, int]:
        c = TransactionCoordinator(_host())
        c.on_elected(4, 1)
        c.on_elected(4, 2)
        while c.loading:
            await asyncio.sleep(0)
        c.on_elected(4, 2)  # the same epoch again: nothing to do
        assert not c.loading
        return c.owned

    assert asyncio.run(run()) == {4: 2}
