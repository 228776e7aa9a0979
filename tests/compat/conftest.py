"""Compatibility tests: stock Kafka clients (confluent-kafka/librdkafka, kafka-python, aiokafka, kcat)
against a real broker process. Marked ``compat`` (``make compat``)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/compat/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.compat)
