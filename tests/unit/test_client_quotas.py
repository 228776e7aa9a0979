"""Client quotas (broker/quotas.py): Kafka 2.3's eight levels of precedence, the sensors they name,
Kafka's Rate over quota.window.num samples and the throttle time it gives. The clock is injected."""

from __future__ import annotations

import pytest

from headwater.broker.quotas import ClientQuotas, Rate
from headwater.quotas import entity_key, validate_quota_config


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


LEVELS = [
    # (entity holding producer_byte_rate, the sensor's tags (user, client-id) for alice/app)
    (entity_key("alice", "app"), ("alice", "app")),
    (entity_key("alice", "<default>"), ("alice", "app")),
    (entity_key("alice", None), ("alice", "")),
    (entity_key("<default>", "app"), ("alice", "app")),
    (entity_key("<default>", "<default>"), ("alice", "app")),
    (entity_key("<default>", None), ("alice", "")),
    (entity_key(None, "app"), ("", "app")),
    (entity_key(None, "<default>"), ("", "app")),
]


def test_the_eight_levels_first_match_wins_and_names_the_sensor() -> None:
    q = ClientQuotas(None, clock=Clock())
    # every level set, each with its own bound: level i binds once levels < i are removed
    for i, (key, _tags) in enumerate(LEVELS):
        q.configs.set_entity(key, {"producer_byte_rate": str(1000 * (i + 1))})
    for i, (key, tags) in enumerate(LEVELS):
        assert q.produce.resolve("alice", "app") == (tags, 1000.0 * (i + 1)), key
        q.configs.set_entity(key, {})
    assert q.produce.resolve("alice", "app") == (("", "app"), None)


def test_a_quota_type_only_sees_the_entities_that_set_it() -> None:
    q = ClientQuotas(None, clock=Clock())
    q.configs.set_entity(entity_key("alice", None), {"consumer_byte_rate": "500", "SCRAM-SHA-256": "salt=..."})
    q.configs.set_entity(entity_key(None, "app"), {"producer_byte_rate": "700"})
    assert q.fetch.resolve("alice", "app") == (("alice", ""), 500.0)
    assert q.produce.resolve("alice", "app") == (("", "app"), 700.0)
    assert q.produce.resolve("bob", "other") == (("", "other"), None)


def test_names_are_sanitized_as_kafka_stores_them() -> None:
    assert entity_key("alice@X", "my app") == "users/alice%40X/clients/my%20app"
    q = ClientQuotas(None, clock=Clock())
    q.configs.set_entity(entity_key("alice@X", "my app"), {"producer_byte_rate": "10"})
    assert q.produce.resolve("alice%40X", "my app") == (("alice%40X", "my app"), 10.0)


def test_static_default_applies_below_clients_default_only() -> None:
    q = ClientQuotas(None, clock=Clock(), producer_default=100.0)
    assert q.produce.resolve("alice", "app") == (("", "app"), 100.0)
    q.configs.set_entity(entity_key(None, "<default>"), {"producer_byte_rate": "300"})
    assert q.produce.resolve("alice", "app") == (("", "app"), 300.0)


def test_rate_pads_to_num_minus_one_windows_and_slides() -> None:
    clock = Clock()
    r = Rate(11, 1.0, clock.now)
    r.record(10_000, clock.now)
    assert r.window_size(clock.now) == pytest.approx(10.0)  # a new sensor: (11 - 1) windows
    assert r.measure(clock.now) == pytest.approx(1000.0)
    for _ in range(30):  # 1000 B/s for 30 s: the rate is 1000 B/s whatever the window
        clock.now += 1.0
        r.record(1000, clock.now)
    assert r.measure(clock.now) == pytest.approx(1000.0, rel=0.11)
    clock.now += 11.0  # every sample expired
    assert r.measure(clock.now) == 0.0


def test_throttle_time_is_kafkas_formula_and_muting_brings_the_rate_back() -> None:
    clock = Clock()
    q = ClientQuotas(None, clock=clock)
    q.configs.set_entity(entity_key(None, "app"), {"producer_byte_rate": "1000"})
    sensor, throttle_ms = q.produce.record("ANONYMOUS", "app", 5000)  # within 10 s x 1000 B/s
    assert throttle_ms == 0
    sensor, throttle_ms = q.produce.record("ANONYMOUS", "app", 10_000)  # 15000 B over 10 s: 1500 B/s
    assert throttle_ms == round((1500 - 1000) / 1000 * 10.0 * 1000)
    q.produce.throttled(sensor, throttle_ms)
    assert sensor.throttle.measure(clock.now) == throttle_ms
    # steady state (the window no longer padded): muted for the throttle time, the rate is the quota
    for _ in range(20):
        clock.now += 1.0
        q.produce.record("ANONYMOUS", "app", 900)
    clock.now += 0.5
    sensor, throttle_ms = q.produce.record("ANONYMOUS", "app", 3000)
    assert 0 < throttle_ms < 5000
    clock.now += throttle_ms / 1000.0
    assert sensor.rate.measure(clock.now) == pytest.approx(1000.0, rel=0.1)


def test_validation_as_kafka() -> None:
    assert validate_quota_config("producer_byte_rate", "1024") is None
    assert validate_quota_config("request_percentage", "12.5") is None
    assert validate_quota_config("producer_byte_rate", "0") is not None
    assert validate_quota_config("producer_byte_rate", "1.5") is not None
    assert validate_quota_config("consumer_byte_rate", "x") is not None
    assert validate_quota_config("request_percentage", "-1") is not None
    assert validate_quota_config("producer_rate", "1") is not None


def test_the_fast_check_never_lets_a_rate_above_the_quota_through() -> None:
    import random

    rng = random.Random(42)
    clock = Clock()
    r = Rate(11, 1.0, clock.now)
    for _ in range(5000):
        clock.now += rng.choice([0.001, 0.05, 0.3, 1.0, 4.0])
        r.record(rng.randint(0, 5000), clock.now)
        bound = rng.choice([100.0, 500.0, 1000.0, 5000.0])
        if r.surely_within(bound):
            assert r.measure(clock.now) <= bound + 1e-9
