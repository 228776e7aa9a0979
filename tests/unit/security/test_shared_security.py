"""lib/headwater/security.py: one definition of what a security protocol implies, used by the broker's
listeners and the client's connections alike, and of how a ``file:``/``env:`` secret is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.broker import security as broker_security
from headwater.client import security as client_security
from headwater.security import PROTOCOLS, SecurityConfigError, resolve_secret, uses_sasl, uses_tls


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_broker_listeners_and_clients_agree_on_what_a_protocol_implies(protocol: str) -> None:
    listener = broker_security.ListenerSecurity("L", protocol)
    client = client_security.ClientSecurity(protocol=protocol)
    assert listener.uses_tls == client.uses_tls == uses_tls(protocol) == ("SSL" in protocol)
    assert listener.uses_sasl == client.uses_sasl == uses_sasl(protocol) == protocol.startswith("SASL_")


def test_one_error_class_for_broker_and_client_settings() -> None:
    assert broker_security.SecurityConfigError is client_security.SecurityConfigError is SecurityConfigError


def test_secrets_from_a_file_or_the_environment_never_in_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "pw"
    f.write_bytes(b"from-file\r\nsecond line\n")
    monkeypatch.setenv("HW_SHARED_PW", "from-env")
    monkeypatch.delenv("HW_SHARED_UNSET", raising=False)
    assert resolve_secret(f"file:{f}", "p") == "from-file"
    assert resolve_secret("env:HW_SHARED_PW", "p") == "from-env"
    assert resolve_secret("as-written", "p") == "as-written"
    assert resolve_secret(None, "p") is None
    with pytest.raises(SecurityConfigError, match=r"http\.auth\.token: environment variable HW_SHARED_UNSET"):
        resolve_secret("env:HW_SHARED_UNSET", "http.auth.token")
    with pytest.raises(SecurityConfigError, match=r"sasl\.password: cannot read"):
        resolve_secret(f"file:{tmp_path / 'missing'}", "sasl.password")
