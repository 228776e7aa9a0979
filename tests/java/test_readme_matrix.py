"""The README's client matrix: each [Jn] cell (the Java client over TLS and SASL, Kafka Streams,
MirrorMaker 2, Spark's Kafka source) names its tests, and every test it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_every_java_cell_names_tests_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    header = next(ln for ln in readme.splitlines() if ln.startswith("| feature | confluent-kafka"))
    for column in ("Java 2.3.1", "Java 4.x", "Kafka Streams", "MirrorMaker 2", 'Spark `format("kafka")`'):
        assert column in header, header
    cited = set(re.findall(r"\[(J\d)\]", readme.split("Cells marked", 1)[0]))
    notes = dict(re.findall(r"^- \[(J\d)\] (.*?)(?=^- \[J|\n\n)", readme, re.S | re.M))
    assert cited and cited == set(notes), (cited, set(notes))
    for key, note in notes.items():
        paths = re.findall(r"`(tests/[\w/]+\.py)", note)
        tests = re.findall(r"\b(test_\w+?)(?:\[|`)", note)
        assert paths and tests, (key, note)
        sources = "".join((ROOT / p).read_text() for p in paths)  # a missing file fails here
        for name in tests:
            assert f"def {name}(" in sources, (key, name)
