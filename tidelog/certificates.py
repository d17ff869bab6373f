"""Throwaway certificates: a CA and the node and client certificates it signs, as PEM files.

What ``tidelog cluster up --tls`` and ``LocalCluster(tls=True)`` use so that a TLS cluster is
one flag away; a real deployment brings certificates from its own CA. Keys are ECDSA P-256
(a handshake costs a fraction of an RSA one) and certificates name ``localhost``, 127.0.0.1 and
::1, the only addresses a Tidelog node binds, so a client's hostname check passes. A node's
certificate serves both ends of a connection (a node presents the same one to clients and, for
mutual TLS, to the peers it dials); a client's may only authenticate a client, so it can never
pass for a server. Which principals count as nodes is the nodes' setting (node.principals), not
the certificate's.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Long enough for any test or demo, short enough that a leaked throwaway key soon expires.
VALIDITY = datetime.timedelta(days=30)
_HOSTS = ("localhost",)
_ADDRESSES = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class CertFiles:
    """A certificate, its private key and the CA that verifies the other end (PEM files), as
    ``ssl.certfile``, ``ssl.keyfile``, ``ssl.cafile`` (node) or ``ssl_certfile``... (client)."""

    certfile: Path
    keyfile: Path
    cafile: Path


class CertificateAuthority:
    """A CA whose key and certificate live in ``directory`` (created, or reused if present)."""

    def __init__(self, directory: Path, common_name: str | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cafile = self.directory / "ca.pem"
        key_path = self.directory / "ca-key.pem"
        if self.cafile.exists() and key_path.exists():
            self._key = serialization.load_pem_private_key(key_path.read_bytes(), None)
            self._cert = x509.load_pem_x509_certificate(self.cafile.read_bytes())
            return
        key = ec.generate_private_key(ec.SECP256R1())
        # Each throwaway CA is named apart, so that a certificate of another one is refused as
        # "unknown issuer" rather than as a bad signature of a namesake.
        common_name = common_name or f"Tidelog throwaway CA {secrets.token_hex(4)}"
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        _write_private(key_path, _key_pem(key))
        self.cafile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self._key, self._cert = key, cert

    def issue(self, name: str, subject: x509.Name | str, *, node: bool = False) -> CertFiles:
        """A certificate for ``subject`` (a common name, or a whole x509.Name), written as
        ``<name>.pem`` and ``<name>-key.pem`` beside the CA: a client's (CLIENT_AUTH only), or
        with ``node`` a node's (SERVER_AUTH and CLIENT_AUTH)."""
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if node:
            usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
        if isinstance(subject, str):
            subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        alt_names: list[x509.GeneralName] = [x509.DNSName(host) for host in _HOSTS]
        alt_names += [x509.IPAddress(ipaddress.ip_address(a)) for a in _ADDRESSES]
        ca_key = self._key
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        files = CertFiles(
            certfile=self.directory / f"{name}.pem",
            keyfile=self.directory / f"{name}-key.pem",
            cafile=self.cafile,
        )
        _write_private(files.keyfile, _key_pem(key))
        files.certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return files


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_private(path: Path, data: bytes) -> None:
    """A private key readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
