"""Waiting for brokers to load a SCRAM user.

Brokers cache SCRAM credentials (broker/credential_cache.py) and load a new or changed user when its
``/config/changes`` notification arrives, which they log: a login sent right after
``headwater configs --alter --entity-type users`` could otherwise come first and be refused.
"""

from __future__ import annotations

import time

from headwater.testing.cluster import LocalBroker


def wait_until_brokers_know(brokers: list[LocalBroker], user: str, timeout: float = 60.0) -> None:
    line = f"SCRAM credentials of user {user!r} now: ["
    deadline = time.monotonic() + timeout
    while not all(line in b.tail(100_000_000) for b in brokers):
        assert time.monotonic() < deadline, f"the brokers never loaded SCRAM user {user}"
        time.sleep(0.1)
