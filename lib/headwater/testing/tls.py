"""Throwaway certificate authorities and certificates for tests and the lab (``cryptography``).

:class:`TestCA` writes PEM files: the CA certificate (what ``ssl.truststore.location`` and a
client's ``ssl.ca.location`` point at) and, per entity, one file with the certificate chain and
the private key (a broker's ``ssl.keystore.location``, ``ssl.keystore.type=PEM``), plus the key
and certificate apart for clients that want them separately (librdkafka's
``ssl.certificate.location`` / ``ssl.key.location``). Keys are EC P-256: quick to generate.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class IssuedCert:
    keystore: Path  # chain + key, PEM (encrypted when a password was given)
    certificate: Path
    key: Path
    password: str | None


class TestCA:
    __test__ = False  # not a pytest class

    def __init__(self, directory: Path, name: str = "Headwater Test CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = directory / f"{_slug(name)}.crt"
        self.ca_file.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        common_name: str,
        hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
        password: str | None = None,
        organizational_unit: str | None = None,
    ) -> IssuedCert:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        if organizational_unit:
            attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, organizational_unit))
        names: list[x509.GeneralName] = []
        for h in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                names.append(x509.DNSName(h))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
        )
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        slug = _slug(common_name)
        keystore = self.directory / f"{slug}.keystore.pem"
        keystore.write_bytes(cert_pem + self.certificate.public_bytes(serialization.Encoding.PEM) + key_pem)
        cert_file = self.directory / f"{slug}.crt"
        cert_file.write_bytes(cert_pem)
        key_file = self.directory / f"{slug}.key"
        key_file.write_bytes(key_pem)
        for f in (keystore, key_file):
            f.chmod(0o600)
        return IssuedCert(keystore, cert_file, key_file, password)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
