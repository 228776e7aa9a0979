"""Loader tests: one local Spark session per test session (a JVM start costs seconds), real brokers."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from headwater.loader.source import HeadwaterDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("headwater-loader-tests")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.dataSource.register(HeadwaterDataSource)
    yield session
    session.stop()
