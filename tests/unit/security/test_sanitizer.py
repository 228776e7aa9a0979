"""Kafka's Sanitizer for user names in znode names, and which change notifications name a user."""

from __future__ import annotations

import pytest

from headwater.broker.credential_cache import changed_user
from headwater.scram import user_config_path
from headwater.zk.config import desanitize, sanitize


@pytest.mark.parametrize(
    ("name", "stored"),
    [
        ("alice", "alice"),
        ("alice@X", "alice%40X"),  # Kafka's own example
        ("a b", "a%20b"),  # URLEncoder's "+" for a space becomes %20
        ("x*y", "x%2Ay"),
        ("CN=a,O=b", "CN%3Da%2CO%3Db"),
        ("dot.dash-under_score", "dot.dash-under_score"),
        ("ü~/", "%C3%BC%7E%2F"),
    ],
)
def test_sanitize_as_kafka(name: str, stored: str) -> None:
    assert sanitize(name) == stored
    assert desanitize(stored) == name
    assert user_config_path(name) == f"/config/users/{stored}"


def test_changed_user_from_notifications() -> None:
    assert changed_user(b'{"version":2,"entity_path":"users/alice%40X"}') == "alice%40X"
    assert changed_user(b'{"version":1,"entity_type":"users","entity_name":"bob"}') == "bob"
    for other in (
        b'{"version":2,"entity_path":"topics/t"}',
        b'{"version":2,"entity_path":"users/alice/clients/c1"}',  # a quota, not a credential
        b'{"version":2,"entity_path":"users/"}',
        b"not json",
        b"",
        b"[]",
    ):
        assert changed_user(other) is None, other
