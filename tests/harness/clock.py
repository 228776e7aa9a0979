"""Record timestamps for tests that write to real brokers.

Time-based retention deletes every segment whose newest record is older than ``retention.ms`` (7 days
by default), the active segment included, as Kafka 2.3 does; test brokers check every second. A test
that stamps its records with a fixed date years ago would see them purged under its feet, so such
tests stamp :data:`RECENT_MS`: a whole hour, an hour before the test session started (so windows,
minutes and hours derived from it are aligned).
"""

from __future__ import annotations

import time

RECENT_MS = (int(time.time()) // 3600 - 1) * 3_600_000
