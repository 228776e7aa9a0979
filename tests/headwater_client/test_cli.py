"""``headwater topics|produce|consume`` as subprocesses against a real broker process."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.harness.broker import BrokerProcess

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def cli(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok(*args: str, stdin: str | None = None) -> str:
    p = cli(*args, stdin=stdin)
    assert p.returncode == 0, f"{args}: exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return p.stdout


def fails(*args: str, stdin: str | None = None) -> str:
    """The one-line error of a failing command (no traceback)."""
    p = cli(*args, stdin=stdin)
    assert p.returncode == 1, f"{args}: exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_topics_create_list_describe_delete(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    out = ok(
        "topics",
        "--bootstrap-server",
        bs,
        "create",
        "--topic",
        "cli-a",
        "--partitions",
        "3",
        "--replication-factor",
        "1",
        "--config",
        "retention.ms=86400000",
        "--config",
        "cleanup.policy=delete",
    )
    assert out == "Created topic cli-a.\n"
    # --bootstrap-server after the action works as well
    ok("topics", "create", "--bootstrap-server", bs, "--topic", "cli-b")
    assert ok("topics", "--bootstrap-server", bs, "list").splitlines() == ["cli-a", "cli-b"]

    lines = ok("topics", "--bootstrap-server", bs, "describe", "--topic", "cli-a").splitlines()
    head, parts = lines[0], lines[1:]
    assert head.startswith("Topic: cli-a\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: ")
    configs = head.split("Configs: ", 1)[1].split(",")
    assert sorted(configs) == ["cleanup.policy=delete", "retention.ms=86400000"]
    assert parts == [f"\tTopic: cli-a\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in range(3)]
    everything = ok("topics", "--bootstrap-server", bs, "describe")
    assert "Topic: cli-b\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: \n" in everything

    assert "already exists" in fails("topics", "--bootstrap-server", bs, "create", "--topic", "cli-a")
    ok("topics", "--bootstrap-server", bs, "create", "--topic", "cli-a", "--if-not-exists")
    assert "INVALID_REPLICATION_FACTOR" in fails(
        "topics", "-b", bs, "create", "--topic", "cli-c", "--replication-factor", "2"
    )

    assert (
        ok("topics", "--bootstrap-server", bs, "delete", "--topic", "cli-a") == "Topic cli-a is marked for deletion.\n"
    )
    for _ in range(100):
        if "cli-a" not in ok("topics", "--bootstrap-server", bs, "list").splitlines():
            break
    else:
        pytest.fail("cli-a was not deleted")
    assert "does not exist" in fails("topics", "--bootstrap-server", bs, "delete", "--topic", "cli-a")
    ok("topics", "--bootstrap-server", bs, "delete", "--topic", "cli-a", "--if-exists")
    assert "does not exist" in fails("topics", "--bootstrap-server", bs, "describe", "--topic", "cli-a")


def test_produce_then_consume_with_keys_and_headers(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    ok("topics", "--bootstrap-server", bs, "create", "--topic", "lines", "--partitions", "2")
    lines = "".join(f"k{i}:value {i}\n" for i in range(100))
    assert (
        ok(
            "produce",
            "--bootstrap-server",
            bs,
            "--topic",
            "lines",
            "--key-separator",
            ":",
            "--header",
            "src=cli",
            stdin=lines,
        )
        == ""
    )
    out = ok(
        "consume",
        "--bootstrap-server",
        bs,
        "--topic",
        "lines",
        "--from-beginning",
        "--max-messages",
        "100",
        "--timeout-ms",
        "10000",
        "--print-key",
        "--key-separator",
        ":",
    )
    assert sorted(out.splitlines()) == sorted(f"k{i}:value {i}" for i in range(100))

    # one partition, with offsets and headers; order within a partition is the produce order
    out = ok(
        "consume",
        "-b",
        bs,
        "--topic",
        "lines",
        "--partition",
        "1",
        "--offset",
        "0",
        "--timeout-ms",
        "1500",
        "--print-offset",
        "--print-headers",
        "--print-key",
    )
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows, "partition 1 got no keys"
    assert [r[0] for r in rows] == [f"Offset:{i}" for i in range(len(rows))]
    assert all(r[1] == "src:cli" for r in rows)
    numbers = [int(r[2][1:]) for r in rows]
    assert numbers == sorted(numbers)
    assert all(r[3] == f"value {n}" for r, n in zip(rows, numbers))


def test_consume_latest_by_default_times_out(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    ok("topics", "-b", bs, "create", "--topic", "quiet")
    ok("produce", "-b", bs, "--topic", "quiet", stdin="old\n")
    p = cli("consume", "-b", bs, "--topic", "quiet", "--timeout-ms", "1000")
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""
    assert "Processed a total of 0 messages" in p.stderr


def test_each_codec_via_cli(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    for codec in CODECS:
        topic = f"cli-{codec}"
        ok("topics", "-b", bs, "create", "--topic", topic)
        values = [f"{codec} line {i} " + "x" * (i % 50) for i in range(200)]
        ok("produce", "-b", bs, "--topic", topic, "--compression", codec, stdin="".join(v + "\n" for v in values))
        out = ok(
            "consume", "-b", bs, "--topic", topic, "--from-beginning", "--max-messages", "200", "--timeout-ms", "10000"
        )
        assert out.splitlines() == values, codec


def test_acks_via_cli(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    for acks in ("0", "1", "all"):
        topic = f"cli-acks-{acks}"
        ok("topics", "-b", bs, "create", "--topic", topic)
        ok("produce", "-b", bs, "--topic", topic, "--acks", acks, stdin="a\nb\nc\n")
        out = ok(
            "consume", "-b", bs, "--topic", topic, "--from-beginning", "--max-messages", "3", "--timeout-ms", "10000"
        )
        assert out.splitlines() == ["a", "b", "c"], acks


def test_bad_input_is_one_readable_line(broker_factory: Any) -> None:
    b = broker_factory(0, auto_create_topics_enable="false")
    bs = b.bootstrap
    assert "127.0.0.1:1" in fails("topics", "--bootstrap-server", "127.0.0.1:1", "list")
    assert "127.0.0.1:1" in fails("produce", "-b", "127.0.0.1:1", "--topic", "t", stdin="x\n")
    assert "127.0.0.1:1" in fails("consume", "-b", "127.0.0.1:1", "--topic", "t", "--timeout-ms", "100")
    assert "malformed broker address" in fails("topics", "--bootstrap-server", "nonsense:port", "list")
    assert "no-such-host.invalid" in fails("topics", "--bootstrap-server", "no-such-host.invalid:9092", "list")
    assert "does not exist" in fails("produce", "-b", bs, "--topic", "missing", stdin="x\n")
    assert "does not exist" in fails("consume", "-b", bs, "--topic", "missing", "--timeout-ms", "100")
    assert "invalid topic name" in fails("topics", "-b", bs, "create", "--topic", "bad/name")
    assert "invalid topic name" in fails("produce", "-b", bs, "--topic", "bad name", stdin="x\n")
    assert "invalid topic name" in fails("consume", "-b", bs, "--topic", "..")
    ok("topics", "-b", bs, "create", "--topic", "keyed")
    assert "no key separator" in fails("produce", "-b", bs, "--topic", "keyed", "--key-separator", ":", stdin="nokey\n")
    assert "--partitions" in fails("topics", "-b", bs, "create", "--topic", "zero", "--partitions", "0")
    assert "partition 5" in fails("consume", "-b", bs, "--topic", "keyed", "--partition", "5", "--timeout-ms", "100")


def _read_back(bs: str, topic: str, count: int) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of partition 0 of ``topic`` as confluent-kafka reads it; the high watermark must be ``count``."""
    from confluent_kafka import Consumer, TopicPartition

    from tests.compat.test_stock_clients import consume_confluent

    c = Consumer({"bootstrap.servers": bs, "group.id": "cli-read-back"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        c.close()
    assert (low, high) == (0, count)
    msgs: list[Any] = consume_confluent(bs, topic, 0, count, timeout=120)
    return [(m.key(), m.value()) for m in msgs]


def test_produce_sends_every_line_once_and_in_order(broker: BrokerProcess) -> None:
    """Large stdin (read in chunks of 1 MiB): the record count and order are the lines', including
    empty lines, CRLF endings, lines split across chunks and a last line without a newline."""
    bs = broker.bootstrap
    ok("topics", "-b", bs, "create", "--topic", "many-lines")
    values = [f"line {i} " + "x" * (i % 97) if i % 1000 else "" for i in range(40_000)]
    text = "".join(v + ("\r\n" if i % 7 == 3 else "\n") for i, v in enumerate(values)) + "no newline at the end"
    values.append("no newline at the end")
    assert len(text) > 2 << 20  # more than two chunks
    ok("produce", "-b", bs, "--topic", "many-lines", stdin=text)
    got = _read_back(bs, "many-lines", len(values))
    assert [v for _, v in got] == [v.encode() for v in values]
    assert all(k is None for k, _ in got)

    # keys with --parse-key (a tab): the same order, each key with its value
    ok("topics", "-b", bs, "create", "--topic", "keyed-lines")
    keyed = [(f"k{i % 7}", f"value {i}") for i in range(5000)]
    ok("produce", "-b", bs, "--topic", "keyed-lines", "--parse-key", stdin="".join(f"{k}\t{v}\n" for k, v in keyed))
    assert _read_back(bs, "keyed-lines", len(keyed)) == [(k.encode(), v.encode()) for k, v in keyed]
