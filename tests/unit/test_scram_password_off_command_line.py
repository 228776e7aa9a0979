"""SCRAM passwords for ``headwater configs --add-config`` off the command line (review L6)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from headwater.cli.configs import parse_scram_configs
from headwater.scram import make_credential


def test_password_from_a_file_or_stdin(tmp_path: Path) -> None:
    secret = tmp_path / "alice.password"
    secret.write_text("alice-secret\nignored second line\n")
    cred = parse_scram_configs(f"SCRAM-SHA-512=[iterations=4096,password=file:{secret}]")["SCRAM-SHA-512"]
    expected = make_credential("SCRAM-SHA-512", "alice-secret", 4096, salt=cred.salt)
    assert (cred.stored_key, cred.server_key) == (expected.stored_key, expected.server_key)
    # file:/dev/stdin: what the ansible role feeds (its `stdin:`), so no argv carries it
    code = (
        "from headwater.cli.configs import parse_scram_configs as p;"
        "c = p('SCRAM-SHA-512=[iterations=4096,password=file:/dev/stdin]')['SCRAM-SHA-512'];"
        "print(c.salt.hex(), c.stored_key.hex())"
    )
    out = subprocess.run([sys.executable, "-c", code], input="bob-secret\n", capture_output=True, text=True, check=True)
    salt, stored = out.stdout.split()
    assert make_credential("SCRAM-SHA-512", "bob-secret", 4096, salt=bytes.fromhex(salt)).stored_key.hex() == stored
