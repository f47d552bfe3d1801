"""A throwaway CA, server and client certificates for TLS / mTLS tests on loopback."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class TestPKI:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    expired_cert: Path  # robot-0's, signed by the CA, valid until yesterday
    expired_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(path: Path, key, cert) -> None:
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _issue(
    common_name: str, ca_key, ca_name, *, is_ca: bool = False, san: list | None = None, expired: bool = False
):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=2 if expired else 0)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_name or _name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return key, builder.sign(ca_key or key, hashes.SHA256())


def make_pki(folder: Path) -> TestPKI:
    """Write ca.pem, server.pem/.key (for localhost and 127.0.0.1) and client.pem/.key into ``folder``."""
    ca_key, ca_cert = _issue("rlinf test CA", None, None, is_ca=True)
    _write(folder / "ca", ca_key, ca_cert)
    san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server_key, server_cert = _issue("localhost", ca_key, ca_cert.subject, san=san)
    _write(folder / "server", server_key, server_cert)
    client_key, client_cert = _issue("robot-0", ca_key, ca_cert.subject, san=[x509.DNSName("robot-0")])
    _write(folder / "client", client_key, client_cert)
    expired_key, expired_cert = _issue(
        "robot-0", ca_key, ca_cert.subject, san=[x509.DNSName("robot-0")], expired=True
    )
    _write(folder / "expired", expired_key, expired_cert)
    return TestPKI(
        folder / "ca.pem",
        folder / "server.pem",
        folder / "server.key",
        folder / "client.pem",
        folder / "client.key",
        folder / "expired.pem",
        folder / "expired.key",
    )
