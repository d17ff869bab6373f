"""Who is calling, and the TLS credentials of a node's listeners and of the channels it dials.

The principal of a request is named as Kafka's DefaultKafkaPrincipalBuilder names it.

On a listener with mutual TLS the peer's certificate was verified against the CA during the
handshake, so its subject names the caller: ``User:<subject>``, the subject written as Java's
``X500Principal.getName()`` writes it (RFC 2253: most specific RDN first, ``CN=alice,O=Acme``),
which is the string ACLs, ``super.users`` and kafka-acls' ``--allow-principal`` use. Everyone
else (a plaintext listener, or TLS without client authentication) is ``User:ANONYMOUS``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from tidelog.errors import InvalidConfigError
from tidelog.node.config import NodeConfig
from tidelog.node.edge.interceptors import HandlerRewriter, behavior_kind
from tidelog.transport import Security

ANONYMOUS = "User:ANONYMOUS"

#: The attribute keywords X500Principal's RFC 2253 form spells out; every other attribute is
#: written as its dotted OID with the DER encoding of its value in hex (RFC 2253 §2.4).
_KEYWORDS = {
    NameOID.COMMON_NAME: "CN",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.STREET_ADDRESS: "STREET",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.USER_ID: "UID",
}
_SPECIAL = frozenset(',+"\\<>;')
_MAX_CACHED_CERTIFICATES = 1024


def principal_of(context: grpc.aio.ServicerContext) -> str:
    """``User:<subject>`` of the verified client certificate of this call, else ANONYMOUS.

    gRPC puts the peer's certificate in the auth context only when the listener asked for one
    (``ssl.client.auth=required``) and the handshake verified it, so its presence is the proof.
    """
    auth = context.auth_context()
    pems = auth.get("x509_pem_cert") if auth else None
    if not pems:
        return ANONYMOUS
    return principal_of_certificate(pems[0])


@functools.lru_cache(maxsize=_MAX_CACHED_CERTIFICATES)
def principal_of_certificate(pem: bytes) -> str:
    """The principal a PEM certificate names (cached: a connection's calls share one)."""
    certificate = x509.load_pem_x509_certificate(pem)
    return "User:" + rfc2253(certificate.subject)


def rfc2253(name: x509.Name) -> str:
    """`name` as X500Principal.getName() (RFC 2253) writes it: RDNs most specific first,
    joined by ``,``, the attributes of a multi-valued RDN joined by ``+``."""
    return ",".join(
        "+".join(_attribute(attribute) for attribute in rdn)
        for rdn in reversed(name.rdns)
    )


def _attribute(attribute: x509.NameAttribute[str | bytes]) -> str:
    keyword = _KEYWORDS.get(attribute.oid)
    if keyword is None:
        return f"{attribute.oid.dotted_string}=#{_der_hex(attribute)}"
    value = attribute.value
    text = value if isinstance(value, str) else value.decode("utf-8", "replace")
    return f"{keyword}={_escape(text)}"


def _escape(value: str) -> str:
    """RFC 2253 §2.4: a backslash before ``,+"\\<>;``, before a leading ``#`` or space and
    before a trailing space."""
    out = []
    for index, char in enumerate(value):
        if (
            char in _SPECIAL
            or (index == 0 and char in "# ")
            or (index == len(value) - 1 and char == " ")
        ):
            out.append("\\")
        out.append(char)
    return "".join(out)


def _der_hex(attribute: x509.NameAttribute[str | bytes]) -> str:
    """The DER encoding (tag, length, contents) of an attribute value, in lowercase hex."""
    value = attribute.value
    contents = value.encode("utf-8") if isinstance(value, str) else value
    tag = attribute._type.value  # the ASN.1 string type the certificate used
    size = len(contents)
    if size < 0x80:
        length = bytes([size])
    else:
        octets = size.to_bytes((size.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(octets)]) + octets
    return (bytes([tag]) + length + contents).hex()


# ---- credentials -------------------------------------------------------------------------------


def server_credentials(config: NodeConfig, *, internal: bool) -> grpc.ServerCredentials | None:
    """The client listener's (``internal`` False) or node-to-node listener's credentials; None
    for a PLAINTEXT one. The node-to-node listener always requires a peer certificate and
    verifies it against internal.ssl.cafile (else ssl.cafile); `NodesOnly` then answers only
    the node principals among its holders."""
    protocol = config.security_inter_broker_protocol if internal else config.security_protocol
    if protocol == "PLAINTEXT":
        return None
    require = internal or config.ssl_client_auth == "required"
    cafile, key = (
        (config.internal_cafile, _internal_cafile_key(config)) if internal
        else (config.ssl_cafile, "ssl.cafile")
    )
    return grpc.ssl_server_credentials(
        [(_pem(config.ssl_keyfile, "ssl.keyfile"), _pem(config.ssl_certfile, "ssl.certfile"))],
        root_certificates=_pem(cafile, key) if require else None,
        require_client_auth=require,
    )


class NodesOnly(HandlerRewriter):
    """Guards the SSL node-to-node listener: every call, of every method it serves, from a
    principal that is not a node's (node.principals, else super.users) is refused with
    PERMISSION_DENIED naming the caller, before its request is even parsed. A certificate the
    CA signed is not enough: the same CA may sign clients' certificates.

    Not installed on a PLAINTEXT node-to-node listener: there no caller has an identity, and
    whoever reaches the port speaks as a node (the node warns about such a listener at start
    when it is not loopback)."""

    def __init__(self, nodes: Collection[str]) -> None:
        super().__init__()
        self._nodes = frozenset(nodes)

    def rewrite(self, method: str, handler: Any) -> Any:
        kind = behavior_kind(handler)
        behavior = getattr(handler, kind)
        nodes = self._nodes

        async def check(context: grpc.aio.ServicerContext) -> None:
            principal = principal_of(context)
            if principal not in nodes:
                await context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"{principal} is not a node principal (node.principals): {method} "
                    "answers only the cluster's nodes",
                )

        gated: Callable[..., Any]
        if inspect.isasyncgenfunction(behavior):

            async def gated(arg: Any, context: grpc.aio.ServicerContext) -> Any:
                await check(context)
                async for response in behavior(arg, context):
                    yield response

        else:

            async def gated(arg: Any, context: grpc.aio.ServicerContext) -> Any:
                await check(context)
                return await behavior(arg, context)

        return handler._replace(**{kind: gated})


class PeerDialer:
    """Opens channels to peers' node-to-node listeners (mutual TLS when that listener is SSL)
    and says why a TLS link cannot connect, for the log line of a broken link: gRPC itself
    only says "Socket closed" when a peer refuses this node's certificate."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self._security = Security(
            config.security_inter_broker_protocol,
            config.internal_cafile or None,
            config.ssl_certfile or None,
            config.ssl_keyfile or None,
        )

    def channel(self, address: str, options: Sequence[tuple[str, Any]]) -> grpc.aio.Channel:
        if not self._security.tls:
            return grpc.aio.insecure_channel(address, options=options)
        return grpc.aio.secure_channel(address, _node_credentials(self.config), options=options)

    def blocking_channel(self, address: str, options: Sequence[tuple[str, Any]]) -> grpc.Channel:
        """The same channel on gRPC's blocking API, for a thread without an event loop (the
        liveness beacon: `tidelog.node.replicas.liveness`)."""
        if not self._security.tls:
            return grpc.insecure_channel(address, options=options)
        return grpc.secure_channel(address, _node_credentials(self.config), options=options)

    async def why_refused(self, address: str) -> str | None:
        """The TLS reason `address` refuses this node, or None (plaintext, or not TLS)."""
        if not self._security.tls:
            return None
        return await self._security.diagnose(address)


def _node_credentials(config: NodeConfig) -> grpc.ChannelCredentials:
    cafile = config.internal_cafile
    return grpc.ssl_channel_credentials(
        root_certificates=_pem(cafile, _internal_cafile_key(config)) if cafile else None,
        private_key=_pem(config.ssl_keyfile, "ssl.keyfile"),
        certificate_chain=_pem(config.ssl_certfile, "ssl.certfile"),
    )


def _internal_cafile_key(config: NodeConfig) -> str:
    """The setting that names the node-to-node CA file, for messages about it."""
    return "internal.ssl.cafile" if config.internal_ssl_cafile else "ssl.cafile"


@functools.lru_cache(maxsize=16)
def _pem(path: str, key: str) -> bytes:
    """The PEM file a setting names, checked here (a bad file is a config error at startup,
    not a failed handshake later, which gRPC reports far from its cause)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidConfigError(f"{key}: cannot read {path}: {exc.strerror}") from None
    try:
        if key == "ssl.keyfile":
            serialization.load_pem_private_key(data, password=None)
        else:
            x509.load_pem_x509_certificates(data)
    except (ValueError, TypeError) as exc:
        raise InvalidConfigError(f"{key}: {path} is not a usable PEM file: {exc}") from None
    return data
