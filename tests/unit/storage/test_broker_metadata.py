"""meta.properties (issue 45): Kafka's file, written where missing, never rewritten, and a dir of
another broker or cluster refused before anything is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.broker.storage.broker_metadata import (
    BrokerMetadata,
    InconsistentBrokerMetadata,
    check_log_dirs,
    read_broker_metadata,
    write_missing,
)
from headwater.broker.storage.fs import OsFileSystem

FS = OsFileSystem()


def test_written_where_missing_and_never_rewritten(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    kafka_23 = "#\n#Fri Nov 27 09:25:01 UTC 2026\nversion=0\nbroker.id=3\n"  # as Kafka 2.3.1 writes it
    (b / "meta.properties").write_text(kafka_23)
    check_log_dirs(FS, [str(a), str(b)], 3, "cid")
    write_missing(FS, [str(a), str(b)], 3, "cid")
    assert read_broker_metadata(FS, str(a)) == BrokerMetadata(3, "cid")
    assert (b / "meta.properties").read_text() == kafka_23
    assert read_broker_metadata(FS, str(b)) == BrokerMetadata(3, None)


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        (["version=0\nbroker.id=4\n"], "Configured broker.id 3 doesn't match stored broker.id 4"),
        (["version=0\nbroker.id=3\n", "version=0\nbroker.id=5\n"], "Failed to match broker.id across log.dirs"),
        (["version=0\nbroker.id=3\ncluster.id=other\n"], "trying to join the wrong cluster"),
        (["version=1\nbroker.id=3\n"], "Unrecognized version"),
        (["version=0\n"], "no valid broker.id"),
    ],
)
def test_a_dir_of_another_broker_or_cluster_is_refused(tmp_path: Path, contents: list[str], message: str) -> None:
    dirs = []
    for i, text in enumerate(contents):
        d = tmp_path / f"d{i}"
        d.mkdir()
        (d / "meta.properties").write_text(text)
        dirs.append(str(d))
    with pytest.raises(InconsistentBrokerMetadata, match=message):
        check_log_dirs(FS, dirs, 3, "cid")
