"""The SASL exchanges of the Kafka listener without a socket: SCRAM-SHA-256 against RFC 7677's
example (section 3), a wrong proof and malformed messages refused, PLAIN checked against the
SCRAM credential, a session's state (handshake first, failures end it), and the credentials'
changes as the controller plans and applies them."""

from __future__ import annotations

import asyncio
import base64

import pytest
from kio.schema.errors import ErrorCode

from tidelog.coordinator.metadata_records import (
    UserScramCredentialRecord,
    decode_record,
    encode_record,
)
from tidelog.coordinator.scram_credentials import (
    ScramDeletion,
    ScramUpsertion,
    apply,
    plan_alter,
)
from tidelog.node.kafka.sasl import PlainServer, SaslFailed, SaslSession, ScramServer
from tidelog.scram import (
    MECHANISMS,
    ScramCredential,
    credential_of,
    password_matches,
    salted_password,
)

SHA256 = MECHANISMS["SCRAM-SHA-256"][0]
SHA512 = MECHANISMS["SCRAM-SHA-512"][0]

# RFC 7677 section 3: user "user", password "pencil".
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _store(user: str, password: str, mechanism: int = SHA256, iterations: int = 4096,
           salt: bytes = RFC_SALT) -> dict[tuple[str, int], ScramCredential]:
    salted = salted_password(mechanism, password, salt, iterations)
    return {(user, mechanism): credential_of(mechanism, salted, salt, iterations)}


def _scram(store: dict[tuple[str, int], ScramCredential]) -> ScramServer:
    return ScramServer("SCRAM-SHA-256", lambda user, code: store.get((user, code)),
                       nonce=RFC_SERVER_NONCE)


def test_scram_sha_256_follows_rfc_7677s_example() -> None:
    server = _scram(_store("user", "pencil"))
    assert server.step(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.step(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.user == "user"


def test_a_wrong_password_fails_the_proof_and_names_authentication() -> None:
    server = _scram(_store("user", "not-pencil"))
    assert server.step(RFC_CLIENT_FIRST).startswith(b"r=")
    with pytest.raises(SaslFailed, match=r"Authentication failed .* invalid credentials"):
        server.step(RFC_CLIENT_FINAL)
    assert server.user is None


def test_an_unknown_user_fails_as_a_wrong_password_does() -> None:
    server = _scram({})
    with pytest.raises(SaslFailed, match=r"Authentication failed .* invalid credentials"):
        server.step(RFC_CLIENT_FIRST)


@pytest.mark.parametrize("first, final", [
    (b"\xff\xfe", None),
    (b"n=user,r=abc", None),  # no gs2 header
    (b"p=tls-unique,,n=user,r=abc", None),  # channel binding asked for
    (b"n,,n=user", None),  # no nonce
    (b"n,,m=ext,n=user,r=abc", None),  # a mandatory extension
    (b"n,,r=abc", None),  # no user
    (RFC_CLIENT_FIRST, b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"),
    (RFC_CLIENT_FIRST, b"c=biws,r=other-nonce,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="),
    (RFC_CLIENT_FIRST, b"c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA"),
    (RFC_CLIENT_FIRST, b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=!!"),
    (RFC_CLIENT_FIRST, b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA"),
])
def test_malformed_scram_messages_are_refused(first: bytes, final: bytes | None) -> None:
    server = _scram(_store("user", "pencil"))
    with pytest.raises(SaslFailed):
        server.step(first)
        assert final is not None
        server.step(final)
    assert server.user is None


def test_plain_checks_the_password_against_the_scram_credential() -> None:
    store = _store("alice", "alice-secret", SHA512, 8192, b"salt")

    def lookup(user: str, code: int) -> ScramCredential | None:
        return store.get((user, code))

    ok = PlainServer(lookup)
    assert asyncio.run(ok.step(b"\0alice\0alice-secret")) == b""
    assert ok.user == "alice"
    assert password_matches(SHA512, store[("alice", SHA512)], "alice-secret")
    for token, reason in ((b"\0alice\0wrong", "invalid credentials"),
                          (b"\0bob\0alice-secret", "invalid credentials"),
                          (b"bob\0alice\0alice-secret", "authorization id"),
                          (b"alice\0alice-secret", "expected 3 tokens"),
                          (b"\0\0pw", "username not specified"),
                          (b"\0alice\0", "password not specified")):
        with pytest.raises(SaslFailed, match=reason):
            asyncio.run(PlainServer(lookup).step(token))


def test_a_session_needs_its_handshake_and_ends_on_a_failure() -> None:
    store = _store("user", "pencil")
    session = SaslSession(("SCRAM-SHA-256",), lambda user, code: store.get((user, code)))
    with pytest.raises(SaslFailed, match="without a SaslHandshake"):
        asyncio.run(session.step(RFC_CLIENT_FIRST))
    assert session.failed

    session = SaslSession(("SCRAM-SHA-256",), lambda user, code: store.get((user, code)))
    assert session.handshake("PLAIN", 1) is ErrorCode.unsupported_sasl_mechanism
    assert session.failed

    session = SaslSession(("SCRAM-SHA-256",), lambda user, code: store.get((user, code)))
    assert session.handshake("SCRAM-SHA-256", 1) is ErrorCode.none
    assert not session.raw_tokens
    asyncio.run(session.step(RFC_CLIENT_FIRST))
    assert not session.authenticated
    with pytest.raises(SaslFailed):
        asyncio.run(session.step(RFC_CLIENT_FINAL))  # another server nonce than the example's
    assert session.failed and not session.authenticated
    assert session.principal == "User:ANONYMOUS"


def test_credentials_are_planned_per_user_as_kafkas_controller_checks_them() -> None:
    salted = salted_password(SHA256, "pw", b"salt", 4096)
    stored: dict[str, dict[int, ScramCredential]] = {}
    records, outcomes = plan_alter(stored, [], [
        ScramUpsertion("alice", SHA256, 4096, b"salt", salted),
        ScramUpsertion("alice", SHA512, 8192, b"salt", salted),
        ScramUpsertion("bob", SHA256, 100, b"salt", salted),
        ScramUpsertion("bob", SHA512, 4096, b"salt", salted),
        ScramUpsertion("carol", 9, 4096, b"salt", salted),
        ScramUpsertion("", SHA256, 4096, b"salt", salted),
    ])
    assert {user: type(error).__name__ if error else None for user, error in outcomes.items()} == {
        "alice": None, "bob": "UnacceptableCredentialError",
        "carol": "UnsupportedSaslMechanismError", "": "UnacceptableCredentialError",
    }
    assert [(r.name, r.mechanism) for r in records] == [("alice", SHA256), ("alice", SHA512)]
    for record in records:
        assert isinstance(record, UserScramCredentialRecord)
        assert decode_record(encode_record(record)) == record
        apply(stored, record)
    assert stored["alice"][SHA256] == credential_of(SHA256, salted, b"salt", 4096)
    assert password_matches(SHA256, stored["alice"][SHA256], "pw")

    records, outcomes = plan_alter(
        stored, [ScramDeletion("alice", SHA512), ScramDeletion("bob", SHA256)],
        [ScramUpsertion("alice", SHA512, 4096, b"salt", salted)])
    assert type(outcomes["alice"]).__name__ == "DuplicateResourceError"
    assert type(outcomes["bob"]).__name__ == "ResourceNotFoundError"
    assert records == []
    records, _ = plan_alter(stored, [ScramDeletion("alice", SHA256),
                                     ScramDeletion("alice", SHA512)], [])
    for record in records:
        apply(stored, record)
    assert stored == {}


def test_plain_checks_the_password_off_the_event_loop() -> None:
    """PBKDF2 with 16,384 iterations takes tens of milliseconds: run on the event loop, every
    password a client guesses would stall each request the node serves meanwhile."""
    store = _store("alice", "alice-secret", SHA512, 16_384, b"salt")

    async def turns_during_the_check() -> int:
        turns, checking = 0, True

        async def other_work() -> None:
            nonlocal turns
            while checking:
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        before = turns
        server = PlainServer(lambda user, code: store.get((user, code)))
        assert await server.step(b"\0alice\0alice-secret") == b""
        checking = False
        await task
        return turns - before

    assert asyncio.run(turns_during_the_check()) > 0
