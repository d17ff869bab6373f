"""The principal of a call (node/edge/security.py): Kafka's ``User:<RFC 2253 subject>`` of a
verified client certificate, ANONYMOUS otherwise, on real certificates and real TLS handshakes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tidelog.certificates import CertFiles, CertificateAuthority
from tidelog.node.edge.security import ANONYMOUS, principal_of, principal_of_certificate

pytestmark = pytest.mark.timeout(60)

_SERVICE = "tidelog.test.Whoami"
_DEADLINE_S = 20.0


def _principal(files: CertFiles) -> str:
    return principal_of_certificate(files.certfile.read_bytes())


def test_common_name_only(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    assert _principal(ca.issue("alice", "alice")) == "User:CN=alice"


def test_client_certificates_authenticate_clients_only(tmp_path: Path) -> None:
    """A client's certificate of the throwaway CA cannot serve a listener; a node's serves both
    ends of its connections."""
    ca = CertificateAuthority(tmp_path)

    def usages(files: CertFiles) -> list[x509.ObjectIdentifier]:
        certificate = x509.load_pem_x509_certificate(files.certfile.read_bytes())
        return list(certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)

    assert usages(ca.issue("alice", "alice")) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert usages(ca.issue("node-1", "node-1", node=True)) == [
        ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]


def test_subject_is_written_most_specific_first_as_kafka_does(tmp_path: Path) -> None:
    # Java's X500Principal.getName() reverses the certificate's RDN order (RFC 2253).
    subject = x509.Name([
        x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
        x509.NameAttribute(NameOID.STATE_OR_PROVINCE_NAME, "CA"),
        x509.NameAttribute(NameOID.LOCALITY_NAME, "Palo Alto"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "Eng"),
        x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
    ])
    files = CertificateAuthority(tmp_path).issue("alice", subject)
    assert _principal(files) == "User:CN=alice,OU=Eng,O=Acme,L=Palo Alto,ST=CA,C=US"


def test_special_characters_are_escaped(tmp_path: Path) -> None:
    subject = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme, Inc."),
        x509.NameAttribute(NameOID.COMMON_NAME, "#smith+jones "),
    ])
    files = CertificateAuthority(tmp_path).issue("odd", subject)
    assert _principal(files) == r"User:CN=\#smith\+jones\ ,O=Acme\, Inc."


def test_attributes_without_a_keyword_are_oid_and_der_hex(tmp_path: Path) -> None:
    # As X500Principal: emailAddress has no RFC 2253 keyword, so 1.2.840.113549.1.9.1=#<DER>,
    # the DER of an IA5String (tag 0x16).
    subject = x509.Name([
        x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
        x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b.c"),
    ])
    files = CertificateAuthority(tmp_path).issue("mail", subject)
    expected_hex = "16" + "05" + b"a@b.c".hex()
    assert _principal(files) == f"User:1.2.840.113549.1.9.1=#{expected_hex},CN=alice"


async def _whoami(
    server_files: CertFiles | None, client_files: CertFiles | None, *, client_auth: bool
) -> str:
    """The principal a real server sees: plaintext without `server_files`, else TLS, the
    client presenting `client_files` (if any)."""

    async def whoami(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return principal_of(context).encode()

    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        _SERVICE, {"Call": grpc.unary_unary_rpc_method_handler(whoami)}
    )])
    if server_files is None:
        port = server.add_insecure_port("127.0.0.1:0")
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    else:
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(
            [(server_files.keyfile.read_bytes(), server_files.certfile.read_bytes())],
            root_certificates=server_files.cafile.read_bytes(),
            require_client_auth=client_auth,
        ))
        channel = grpc.aio.secure_channel(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(
            root_certificates=server_files.cafile.read_bytes(),
            private_key=client_files.keyfile.read_bytes() if client_files else None,
            certificate_chain=client_files.certfile.read_bytes() if client_files else None,
        ))
    await server.start()
    try:
        async with channel:
            answer = await channel.unary_unary(f"/{_SERVICE}/Call")(b"", timeout=_DEADLINE_S)
        return bytes(answer).decode()
    finally:
        await server.stop(0)


def test_principal_of_a_mutual_tls_call_is_the_client_certificate(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    node, client = ca.issue("node", "node-1", node=True), ca.issue("client", "alice")
    assert asyncio.run(_whoami(node, client, client_auth=True)) == "User:CN=alice"


def test_tls_without_client_auth_is_anonymous(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    node = ca.issue("node", "node-1", node=True)
    assert asyncio.run(_whoami(node, None, client_auth=False)) == ANONYMOUS


def test_plaintext_is_anonymous() -> None:
    assert asyncio.run(_whoami(None, None, client_auth=False)) == ANONYMOUS
