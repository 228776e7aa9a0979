"""Every znode path is spelled in headwater.zk only (issue 38 item 2): broker, client library,
mirror, audit, loader and bench import headwater.zk.paths; a path literal anywhere else fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCES = ("lib", "broker", "mirror", "audit", "spark-loader", "bench")
ROOTS = (
    "brokers",
    "config",
    "admin",
    "consumers",
    "cluster/id",
    "controller",
    "controller_epoch",
    "isr_change_notification",
    "log_dir_event_notification",
    "latest_producer_id_block",
    "kafka-acl",
)
LITERAL = re.compile(r"""f?["']/(""" + "|".join(re.escape(r) for r in ROOTS) + r")\b")


def test_no_znode_path_literal_outside_headwater_zk() -> None:
    offenders = []
    for top in SOURCES:
        for path in (ROOT / top).rglob("*.py"):
            if "headwater/zk/" in path.as_posix():
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if LITERAL.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []


def test_the_check_sees_a_literal() -> None:
    assert LITERAL.search('x = f"/brokers/ids/{b}"')
    assert LITERAL.search("CHANGES = '/config/changes'")
    assert not LITERAL.search('route = "/configure"')
