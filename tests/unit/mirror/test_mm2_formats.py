"""The mirror's offset syncs and checkpoints are MirrorMaker 2's own bytes; syncs and translation follow MM2's rules.

``mm2-3.9.1-golden.tsv`` is the output of ``tests/java/mm2/Mm2Golden.java`` run against
connect-mirror / connect-mirror-client 3.9.1 (how to regenerate: in that file).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.mirror.checkpoints import (
    Checkpoint,
    OffsetSync,
    OffsetSyncStore,
    PartitionSyncs,
    checkpoints_topic,
    decode_checkpoint,
    decode_offset_sync,
    encode_checkpoint,
    encode_offset_sync,
    offset_syncs_topic,
)
from headwater.protocol.errors import DecodeError

GOLDEN = {
    name: (key, value)
    for name, key, value in (
        line.split("\t") for line in (Path(__file__).parent / "mm2-3.9.1-golden.tsv").read_text().splitlines()
    )
}

SYNCS = {
    "offset_sync": OffsetSync("orders", 3, 1234, 1200),
    "offset_sync_zero": OffsetSync("a", 0, 0, 0),
    "offset_sync_unicode": OffsetSync("t\u00e9st", 2147483647, 9007199254740993, 42),
}
CHECKPOINTS = {
    "checkpoint": Checkpoint("billing", "dc1.orders", 3, 1234, 1201, ""),
    "checkpoint_metadata": Checkpoint("g", "orders", 0, 7, 5, "m\u00e9ta"),
}


@pytest.mark.parametrize("name", sorted(SYNCS))
def test_offset_sync_bytes_are_mm2s(name: str) -> None:
    key, value = encode_offset_sync(SYNCS[name])
    assert (key.hex(), value.hex()) == GOLDEN[name]
    assert decode_offset_sync(bytes.fromhex(GOLDEN[name][0]), bytes.fromhex(GOLDEN[name][1])) == SYNCS[name]


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_checkpoint_bytes_are_mm2s(name: str) -> None:
    key, value = encode_checkpoint(CHECKPOINTS[name])
    assert (key.hex(), value.hex()) == GOLDEN[name]
    assert decode_checkpoint(bytes.fromhex(GOLDEN[name][0]), bytes.fromhex(GOLDEN[name][1])) == CHECKPOINTS[name]


@pytest.mark.parametrize("name", sorted(SYNCS) + sorted(CHECKPOINTS))
def test_short_or_malformed_records_raise_decode_error(name: str) -> None:
    decode = decode_offset_sync if name in SYNCS else decode_checkpoint
    key, value = (bytes.fromhex(h) for h in GOLDEN[name])
    for k, v in [(key[:-1], value), (key, value[:-1]), (b"", b""), (b"\x00\x02\xff\xfe" + key[4:], value)]:
        with pytest.raises(DecodeError):
            decode(k, v)


def test_internal_topic_names_are_mm2s() -> None:
    assert offset_syncs_topic("agg") == GOLDEN["topic_offset_syncs"][0]
    assert checkpoints_topic("dc1") == GOLDEN["topic_checkpoints"][0]
    assert offset_syncs_topic("agg", "_") == GOLDEN["topic_offset_syncs_separator"][0]
    assert checkpoints_topic("dc1", "_") == GOLDEN["topic_checkpoints_separator"][0]
    # replication.policy.internal.topic.separator.enabled = false: the names MM2 had before 3.0
    assert offset_syncs_topic("agg") == GOLDEN["topic_offset_syncs_separator_disabled"][0]
    assert checkpoints_topic("dc1") == GOLDEN["topic_checkpoints_separator_disabled"][0]


def test_mm2s_internal_topics_are_never_mirrored() -> None:
    from headwater.mirror.config import parse

    config = parse(
        {
            "clusters": "dc1, agg",
            "dc1.zookeeper.connect": "zk:2181",
            "agg.bootstrap.servers": "agg:9092",
            "dc1->agg.enabled": "true",
            "replication.policy.separator": "_",
        }
    )
    flow = config.flows[0]
    assert config.offset_syncs_topic(flow) == "mm2-offset-syncs_agg_internal"
    assert config.checkpoints_topic("dc1") == "dc1_checkpoints_internal"
    for topic in (
        "mm2-offset-syncs_agg_internal",
        "dc1_checkpoints_internal",
        "x.internal",
        "mm2-offset-syncs.agg.internal",
    ):
        assert not flow.matches(topic)
    assert flow.matches("orders") and flow.matches("international")


def _record_by_record(syncs: PartitionSyncs, pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(u, d) for u, d in pairs if syncs.update(u, d)]


def test_dense_batches_give_the_syncs_of_mm2s_record_by_record_rule() -> None:
    # three batches: 250 records, a control batch's offset skipped, 40, then 500 with the target moved on
    batches = [(0, 0, 250), (251, 250, 40), (291, 290, 500)]
    fast, slow = PartitionSyncs(100), PartitionSyncs(100)
    got = [s for up, down, n in batches for s in fast.dense_batch(up, down, n)]
    want = _record_by_record(slow, [(up + k, down + k) for up, down, n in batches for k in range(n)])
    assert got == want
    assert got[:4] == [(0, 0), (101, 101), (202, 202), (251, 250)]  # the first, every 100+1, the gap


def test_translation_never_skips_and_rereads_at_most_offset_lag_max() -> None:
    lag = 10
    syncs = PartitionSyncs(lag)
    store = OffsetSyncStore()
    # source offsets 0..999, every 7th a control batch offset (not copied): target offsets dense
    up_to_down: dict[int, int] = {}
    down = 0
    for up in range(1000):
        if up % 7 == 6:
            continue
        up_to_down[up] = down
        for u, d in syncs.dense_batch(up, down, 1):
            store.add(OffsetSync("t", 0, u, d))
        down += 1
    for committed in range(1, 1000):
        translated = store.translate("t", 0, committed)
        assert translated is not None
        # the first record the group has not read: the smallest mirrored source offset >= committed
        first_unread = min(u for u in up_to_down if u >= committed) if committed <= 998 else None
        if first_unread is None:
            continue
        assert translated <= up_to_down[first_unread], committed  # nothing skipped
        assert up_to_down[first_unread] - translated <= lag, committed  # at most offset.lag.max re-read


def test_translation_of_an_offset_older_than_every_sync_is_unknown() -> None:
    store = OffsetSyncStore()
    store.add(OffsetSync("t", 0, 500, 20))
    assert store.translate("t", 0, 499) is None
    assert store.translate("t", 0, 500) == 20
    assert store.translate("t", 0, 900) == 21
    assert store.translate("t", 1, 900) is None


def test_golden_file_is_what_mm2_writes_today() -> None:
    """Run Mm2Golden against the cached connect-mirror 3.9.1 jars: its output is the committed file."""
    import subprocess

    from headwater.testing import java

    reason = java.unavailable()
    if reason is not None:
        pytest.skip(reason)
    source = Path(__file__).parents[2] / "java" / "mm2" / "Mm2Golden.java"
    classes = java.compile_sources([source], "streams-mm2")
    cmd = java.java_command("org.apache.kafka.connect.mirror.Mm2Golden", [], "streams-mm2", extra=[classes])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == (Path(__file__).parent / "mm2-3.9.1-golden.tsv").read_text()
