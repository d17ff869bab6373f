"""SASL on the Kafka listener (SASL_PLAINTEXT, SASL_SSL): SaslHandshake (key 17, v0-1) and
SaslAuthenticate (key 36, v0-2, KIP-152), with PLAIN and SCRAM-SHA-256/512 (RFC 5802, RFC 7677)
checked against the SCRAM credentials of the metadata log (tidelog/scram.py).

Each connection of a SASL listener has a `SaslSession`. Until it is authenticated the
connection answers only ApiVersions, SaslHandshake and SaslAuthenticate, one request at a
time; anything else closes it (Kafka's ILLEGAL_SASL_STATE). A SaslHandshake naming a mechanism
that is not enabled is answered UNSUPPORTED_SASL_MECHANISM with the enabled ones, and a failed
authentication SASL_AUTHENTICATION_FAILED with a message; the connection is closed after
either answer, as Kafka closes it. Once authenticated, the connection's principal is
``User:<name>`` for every later request (a TLS client certificate is not used then), and
further SASL requests get ILLEGAL_SASL_STATE. Re-authentication (KIP-368) is not offered:
SaslAuthenticate answers a session lifetime of 0 (none).

SaslHandshake v0 is Kafka's older framing: the SASL tokens then follow as bare size-prefixed
frames, without Kafka headers (`SaslSession.raw_tokens`); v1 carries them in SaslAuthenticate.

PLAIN checks the password against the user's SCRAM credential (the StoredKey recomputed with
the stored salt and iterations), so one store serves both mechanisms.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import hmac
import secrets
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.edge.security import ANONYMOUS
from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.codec import response_type
from tidelog.node.kafka.fields import build
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.scram import (
    MECHANISMS,
    ScramCredential,
    hmac_of,
    password_matches,
    stored_key_of,
)

SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 17, 36
#: The mechanisms the listener can offer (sasl.enabled.mechanisms picks among them).
SUPPORTED_MECHANISMS = ("PLAIN", *MECHANISMS)
#: How long a connection stays open after its refusal is written (Kafka's
#: connection.failed.authentication.delay.ms, 100 ms by default): a client that reads the
#: answer and sees the close at once may lose the answer (kafka-python does), and a client
#: guessing passwords is slowed down.
FAILED_AUTHENTICATION_DELAY_S = 0.1
#: The longest SASL token taken (a SCRAM message or a PLAIN triple is far smaller).
MAX_TOKEN_BYTES = 8192

#: (user, mechanism code) -> that user's credential, None when there is none.
CredentialLookup = Callable[[str, int], ScramCredential | None]


def scram_lookup(controller: ControllerDriver) -> CredentialLookup:
    """The credentials of the metadata log as this node has applied them, read at each
    authentication (a credential set or deleted counts for the next one)."""

    def lookup(user: str, mechanism: int) -> ScramCredential | None:
        return controller.image.scram_credentials.get(user, {}).get(mechanism)

    return lookup


class SaslFailed(Exception):
    """Authentication failed: the message is the client's (SASL_AUTHENTICATION_FAILED)."""


def failed_message(mechanism: str) -> str:
    """What a client is told of wrong credentials (Kafka's words), the same for an unknown
    user and a wrong password, so that the answer tells no one which users exist."""
    return (f"Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {mechanism}")


class PlainServer:
    """SASL/PLAIN (RFC 4616): one message ``authzid NUL authcid NUL password``."""

    def __init__(self, credentials: CredentialLookup) -> None:
        self._credentials = credentials
        self.user: str | None = None

    async def step(self, token: bytes) -> bytes:
        try:
            parts = token.decode().split("\0")
        except UnicodeDecodeError:
            raise SaslFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if len(parts) != 3:
            raise SaslFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise SaslFailed("Authentication failed: username not specified")
        if not password:
            raise SaslFailed("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise SaslFailed("Authentication failed: Client requested an authorization id "
                             "that is different from username")
        for code in (MECHANISMS[name][0] for name in MECHANISMS):
            credential = self._credentials(user, code)
            if credential is not None:
                # PBKDF2 with the stored salt and up to 16,384 iterations (tens of ms) runs in a
                # thread (hashlib releases the GIL), so that clients guessing passwords do not
                # stall the event loop the node serves every request from. The credential is
                # immutable: the thread gets a snapshot.
                if await asyncio.to_thread(password_matches, code, credential, password):
                    self.user = user
                    return b""
                break
        raise SaslFailed(failed_message("PLAIN"))


class ScramServer:
    """The server side of one SCRAM exchange: client-first -> server-first, client-final ->
    server-final (RFC 5802 section 5). Channel binding is not offered (gs2 header ``n`` or
    ``y``), as Kafka does not."""

    def __init__(
        self, mechanism: str, credentials: CredentialLookup, nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self._code = MECHANISMS[mechanism][0]
        self._credentials = credentials
        self._server_nonce = nonce or secrets.token_urlsafe(24)
        self._first: tuple[str, str, str, ScramCredential, str] | None = None
        self.user: str | None = None

    def step(self, token: bytes) -> bytes:
        try:
            message = token.decode()
        except UnicodeDecodeError:
            raise SaslFailed(f"Invalid {self.mechanism} message: not UTF-8") from None
        if self._first is None:
            return self._client_first(message).encode()
        if self.user is None:
            return self._client_final(message).encode()
        raise SaslFailed(f"{self.mechanism}: the exchange is complete")

    def _client_first(self, message: str) -> str:
        gs2, sep, bare = _split_gs2(message)
        if not sep:
            raise SaslFailed(f"Invalid {self.mechanism} client-first message")
        fields = _attributes(bare, self.mechanism)
        if "m" in fields:
            raise SaslFailed(f"{self.mechanism}: mandatory extension not supported")
        user, client_nonce = _saslname(fields.get("n", "")), fields.get("r", "")
        if not user or not client_nonce or not client_nonce.isprintable() or "," in client_nonce:
            raise SaslFailed(f"Invalid {self.mechanism} client-first message: no user or nonce")
        authzid = gs2.split(",")[1]
        if authzid and _saslname(authzid.removeprefix("a=")) != user:
            raise SaslFailed("Authentication failed: Client requested an authorization id "
                             "that is different from username")
        credential = self._credentials(user, self._code)
        if credential is None:
            raise SaslFailed(failed_message(self.mechanism))
        nonce = client_nonce + self._server_nonce
        server_first = (f"r={nonce},s={base64.b64encode(credential.salt).decode()},"
                        f"i={credential.iterations}")
        self._first = (gs2 + ",", bare, server_first, credential, user)
        return server_first

    def _client_final(self, message: str) -> str:
        assert self._first is not None
        gs2_header, client_first_bare, server_first, credential, user = self._first
        without_proof, sep, proof_text = message.rpartition(",p=")
        if not sep:
            raise SaslFailed(f"Invalid {self.mechanism} client-final message: no proof")
        fields = _attributes(without_proof, self.mechanism)
        if fields.get("c") != base64.b64encode(gs2_header.encode()).decode():
            raise SaslFailed(f"{self.mechanism}: invalid channel binding")
        if fields.get("r") != server_first[2:].split(",", 1)[0]:
            raise SaslFailed(f"{self.mechanism}: invalid nonce")
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except (binascii.Error, ValueError):
            raise SaslFailed(f"Invalid {self.mechanism} client proof") from None
        auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
        signature = hmac_of(self._code, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslFailed(failed_message(self.mechanism))
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(stored_key_of(self._code, client_key), credential.stored_key):
            raise SaslFailed(failed_message(self.mechanism))
        self.user = user
        server_signature = hmac_of(self._code, credential.server_key, auth_message)
        return f"v={base64.b64encode(server_signature).decode()}"


def _split_gs2(message: str) -> tuple[str, bool, str]:
    """(gs2 header without its last comma, whether it was well formed, the bare message)."""
    parts = message.split(",", 2)
    if len(parts) != 3 or parts[0] not in ("n", "y") or (parts[1] and not
                                                          parts[1].startswith("a=")):
        return "", False, ""
    return f"{parts[0]},{parts[1]}", True, parts[2]


def _attributes(text: str, mechanism: str) -> dict[str, str]:
    """``k=v,k=v`` of a SCRAM message (a value may hold ``=``, never ``,``); RFC 5802's
    attributes are one letter, Kafka's extensions (``tokenauth=true``) longer names, which
    are read and not used."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key or key in fields:
            raise SaslFailed(f"Invalid {mechanism} message: {part[:40]!r} is not an attribute")
        fields[key] = value
    return fields


def _saslname(name: str) -> str:
    """A SCRAM user name decoded (``=2C`` is a comma, ``=3D`` an equals sign)."""
    return name.replace("=2C", ",").replace("=3D", "=")


class SaslSession:
    """One connection's authentication: the mechanism its handshake chose, the exchange under
    way, and its outcome."""

    def __init__(self, mechanisms: tuple[str, ...], credentials: CredentialLookup) -> None:
        self.mechanisms = mechanisms
        self._credentials = credentials
        self._server: PlainServer | ScramServer | None = None
        #: The authenticated principal, ANONYMOUS before.
        self.principal = ANONYMOUS
        self.authenticated = False
        #: The answer being written ends the connection (a refused handshake or a failed
        #: authentication).
        self.failed = False
        #: SaslHandshake v0 chose the mechanism: the tokens come as bare frames.
        self.raw_tokens = False

    def handshake(self, mechanism: str, version: int) -> ErrorCode:
        if self.authenticated or self._server is not None:
            self.failed = True
            return ErrorCode.illegal_sasl_state
        if mechanism not in self.mechanisms:
            self.failed = True
            return ErrorCode.unsupported_sasl_mechanism
        self._server = (PlainServer(self._credentials) if mechanism == "PLAIN"
                        else ScramServer(mechanism, self._credentials))
        self.raw_tokens = version == 0
        return ErrorCode.none

    async def step(self, token: bytes) -> bytes:
        """The answer to the client's next token; raises SaslFailed (and the session is
        `failed`) when the client is refused."""
        if self._server is None or self.authenticated:
            self.failed = True
            raise SaslFailed("SaslAuthenticate without a SaslHandshake before it"
                             if self._server is None else "already authenticated")
        try:
            if len(token) > MAX_TOKEN_BYTES:
                raise SaslFailed(f"a SASL token of {len(token)} bytes (the limit is "
                                 f"{MAX_TOKEN_BYTES})")
            server = self._server
            answer = (await server.step(token) if isinstance(server, PlainServer)
                      else server.step(token))
        except SaslFailed:
            self.failed = True
            raise
        if self._server.user is not None:
            self.principal = f"User:{self._server.user}"
            self.authenticated = True
            self.raw_tokens = False
        return answer


class SaslApis:
    """SaslHandshake and SaslAuthenticate of every connection of the listener; `call.sasl` is
    the connection's session (None on a listener without SASL, which answers both
    ILLEGAL_SASL_STATE, as Kafka does)."""

    async def handshake(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(SASL_HANDSHAKE_KEY, call.api_version)
        session = call.sasl
        if session is None:
            return build(response, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
        error = session.handshake(request.mechanism, call.api_version)
        return build(response, error_code=error, mechanisms=session.mechanisms)

    async def authenticate(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(SASL_AUTHENTICATE_KEY, call.api_version)
        session = call.sasl
        no_lifetime = datetime.timedelta(0)
        if session is None or session.authenticated:
            return build(
                response, error_code=ErrorCode.illegal_sasl_state,
                error_message="SaslAuthenticate request received after successful "
                "authentication" if session else "this listener does not use SASL",
                auth_bytes=b"", session_lifetime=no_lifetime,
            )
        try:
            answer = await session.step(request.auth_bytes)
        except SaslFailed as exc:
            return build(response, error_code=ErrorCode.sasl_authentication_failed,
                         error_message=str(exc), auth_bytes=b"", session_lifetime=no_lifetime)
        return build(response, error_code=ErrorCode.none, error_message=None,
                     auth_bytes=answer, session_lifetime=no_lifetime)


def add_sasl(registry: ApiRegistry) -> None:
    apis = SaslApis()
    registry.add(SASL_HANDSHAKE_KEY, 0, 1, apis.handshake)
    registry.add(SASL_AUTHENTICATE_KEY, 0, 2, apis.authenticate)
