"""SCRAM credentials (RFC 5802, with SHA-256 and SHA-512 as RFC 7677 and Kafka use them): what a
node keeps of a user's password, and how it is derived.

A credential is the salt, the iteration count, StoredKey and ServerKey; never the password nor
the salted password, so a copy of the metadata log does not let anyone log in (StoredKey only
checks a proof, ServerKey only signs the server's answer). The admin client salts the password
itself (`salted_password`) and sends the salt and the salted password, as Kafka's does; the
controller derives the two keys (`credential_of`).

Mechanisms carry Kafka's codes (ScramMechanism: 1 SHA-256, 2 SHA-512) in records and requests,
and Kafka's bounds on iterations (4096 to 16384).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Final

#: Kafka's SCRAM mechanisms by name: (code in records and requests, hashlib name).
MECHANISMS: Final[dict[str, tuple[int, str]]] = {
    "SCRAM-SHA-256": (1, "sha256"),
    "SCRAM-SHA-512": (2, "sha512"),
}
#: Kafka's code of a mechanism -> its name.
MECHANISM_NAMES: Final[dict[int, str]] = {code: name for name, (code, _) in MECHANISMS.items()}
#: Kafka's bounds on a credential's iterations (RFC 7677 asks for at least 4096).
MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384
#: Bytes of a salt the admin client draws.
SALT_BYTES: Final = 32


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a node keeps of one user's password for one mechanism."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def hash_name(mechanism: int) -> str:
    """hashlib's name of the hash of mechanism code `mechanism`; KeyError for an unknown code."""
    return MECHANISMS[MECHANISM_NAMES[mechanism]][1]


def salted_password(mechanism: int, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword: Hi(password, salt, i), which is PBKDF2 with HMAC of the
    mechanism's hash. The password is taken as its UTF-8 bytes (Kafka does no SASLprep)."""
    return hashlib.pbkdf2_hmac(hash_name(mechanism), password.encode(), salt, iterations)


def hmac_of(mechanism: int, key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, hash_name(mechanism))


def stored_key_of(mechanism: int, client_key: bytes) -> bytes:
    """StoredKey: H(ClientKey)."""
    return hashlib.new(hash_name(mechanism), client_key).digest()


def credential_of(
    mechanism: int, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The credential of a salted password: ClientKey = HMAC(SaltedPassword, "Client Key"),
    StoredKey = H(ClientKey), ServerKey = HMAC(SaltedPassword, "Server Key")."""
    client_key = hmac_of(mechanism, salted, b"Client Key")
    return ScramCredential(
        salt, stored_key_of(mechanism, client_key), hmac_of(mechanism, salted, b"Server Key"),
        iterations,
    )


def new_salt() -> bytes:
    return secrets.token_bytes(SALT_BYTES)


def password_matches(mechanism: int, credential: ScramCredential, password: str) -> bool:
    """Whether `password` is the one `credential` was made of: its StoredKey recomputed with
    the stored salt and iterations, compared in constant time (SASL/PLAIN checks a password
    against the SCRAM credentials, so that one store serves both mechanisms)."""
    salted = salted_password(mechanism, password, credential.salt, credential.iterations)
    candidate = credential_of(mechanism, salted, credential.salt, credential.iterations)
    return hmac.compare_digest(candidate.stored_key, credential.stored_key)


@dataclass(frozen=True, slots=True)
class UserScramCredentialUpsertion:
    """Set `user`'s credential for `mechanism` ("SCRAM-SHA-256" or "SCRAM-SHA-512") from
    `password` (Kafka's AdminClient class of this name): the admin client salts the password
    and sends only the salt and the salted password."""

    user: str
    mechanism: str
    password: str
    iterations: int = MIN_ITERATIONS


@dataclass(frozen=True, slots=True)
class UserScramCredentialDeletion:
    """Delete `user`'s credential for `mechanism`."""

    user: str
    mechanism: str


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    """What describing a user's credentials shows: the mechanism and the iterations, never a
    salt or a key."""

    mechanism: str
    iterations: int


def mechanism_code(name: str) -> int:
    """Kafka's code of a SCRAM mechanism name; ValueError naming the known ones."""
    if name not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {name!r} (known: {', '.join(MECHANISMS)})")
    return MECHANISMS[name][0]
