"""``headwater groups`` against a real broker and a confluent-kafka consumer group: list, describe with
lag and owner, reset-offsets (refused while the group has members, a dry run, then --execute), delete."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer

from tests.compat.test_groups import GROUP_BROKER
from tests.compat.test_stock_clients import create_topic, produce_confluent
from tests.harness.broker import BrokerProcess
from tests.headwater_client.test_cli import fails, ok

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]


def _rows(out: str, topic: str) -> dict[int, list[str]]:
    """partition -> the describe table's columns for it."""
    return {
        int(cols[2]): cols for cols in (line.split() for line in out.splitlines()) if len(cols) > 2 and cols[1] == topic
    }


def test_groups_list_describe_reset_delete(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(0, **GROUP_BROKER)
    bs, topic, group = b.bootstrap, "clicks", "reporting"
    create_topic(bs, topic, partitions=2)
    produce_confluent(bs, topic, [{"value": b"v%d" % i, "partition": i % 2} for i in range(20)])

    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": group,
            "client.id": "reporter",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    read = 0
    deadline = time.monotonic() + 60
    while read < 12:
        assert time.monotonic() < deadline, f"read only {read} records"
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            read += 1
            if read == 12:
                c.commit(message=msg, asynchronous=False)  # partition msg.partition() up to here
    try:
        assert group in ok("groups", "-b", bs, "list").split()
        out = ok("groups", "-b", bs, "describe", "--group", group)
        assert "state Stable" in out and "1 member(s)" in out
        rows = _rows(out, topic)
        assert set(rows) == {0, 1}
        assert all(r[4] == "10" and r[8] == "reporter" for r in rows.values())  # log end offset, client id
        committed = [r for r in rows.values() if r[3] != "-"]
        assert len(committed) == 1 and int(committed[0][5]) == 10 - int(committed[0][3])  # lag = end - committed

        err = fails(
            "groups", "-b", bs, "reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute"
        )
        assert "active members" in err
    finally:
        c.close()

    plan = ok("groups", "-b", bs, "reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-latest")
    assert "Dry run" in plan and _rows(plan, topic)[1][3] == "10"
    ok("groups", "-b", bs, "reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    rows = _rows(ok("groups", "-b", bs, "describe", "--group", group), topic)
    assert [rows[p][3] for p in (0, 1)] == ["0", "0"] and [rows[p][5] for p in (0, 1)] == ["10", "10"]

    assert ok("groups", "-b", bs, "delete", "--group", group).startswith("Deleted group")
    assert group not in ok("groups", "-b", bs, "list").split()
    assert "does not exist" in fails("groups", "-b", bs, "delete", "--group", group)
