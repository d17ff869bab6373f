"""Users' SCRAM credentials in the metadata log, as Kafka keeps them in KRaft: the records an
AlterUserScramCredentials plans, checked as Kafka's controller checks them.

Outcomes are per user, in the order the request first names each: a user with one refused
change gets no change at all (its other changes are not written either). The controller
derives StoredKey and ServerKey from the salted password the admin client sent; the salted
password is not kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tidelog.coordinator.metadata_records import (
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from tidelog.errors import (
    DuplicateResourceError,
    ResourceNotFoundError,
    TidelogError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from tidelog.scram import (
    MAX_ITERATIONS,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    ScramCredential,
    credential_of,
)

#: user -> mechanism code -> credential.
Credentials = Mapping[str, Mapping[int, ScramCredential]]
ScramRecord = UserScramCredentialRecord | RemoveUserScramCredentialRecord


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


def plan_alter(
    credentials: Credentials, deletions: Sequence[ScramDeletion],
    upsertions: Sequence[ScramUpsertion],
) -> tuple[list[ScramRecord], dict[str, TidelogError | None]]:
    """The records of an AlterUserScramCredentials, and each named user's outcome (None: its
    changes are among the records)."""
    outcomes: dict[str, TidelogError | None] = {}
    planned: dict[str, list[ScramRecord]] = {}
    seen: set[tuple[str, int]] = set()
    changes: list[ScramDeletion | ScramUpsertion] = [*deletions, *upsertions]
    for change in changes:
        outcomes.setdefault(change.name, None)
        if outcomes[change.name] is not None:
            continue
        try:
            record = _record_of(credentials, change, seen)
        except TidelogError as exc:
            outcomes[change.name] = exc
            continue
        planned.setdefault(change.name, []).append(record)
    records = [record for user, error in outcomes.items() if error is None
               for record in planned.get(user, [])]
    return records, outcomes


def _record_of(
    credentials: Credentials, change: ScramDeletion | ScramUpsertion,
    seen: set[tuple[str, int]],
) -> ScramRecord:
    """The record of one change; raises the error that refuses it."""
    if not change.name:
        raise UnacceptableCredentialError("Username must not be empty")
    if change.mechanism not in MECHANISM_NAMES:
        raise UnsupportedSaslMechanismError(
            f"Unknown SCRAM mechanism {change.mechanism} (1: SCRAM-SHA-256, 2: SCRAM-SHA-512)"
        )
    key = (change.name, change.mechanism)
    if key in seen:
        raise DuplicateResourceError(
            "A user credential cannot be altered twice in the same request"
        )
    seen.add(key)
    if isinstance(change, ScramDeletion):
        if change.mechanism not in credentials.get(change.name, {}):
            raise ResourceNotFoundError(
                "Attempt to delete a user credential that does not exist"
            )
        return RemoveUserScramCredentialRecord(change.name, change.mechanism)
    if change.iterations < MIN_ITERATIONS:
        raise UnacceptableCredentialError(
            f"Too few iterations: {change.iterations} (at least {MIN_ITERATIONS})"
        )
    if change.iterations > MAX_ITERATIONS:
        raise UnacceptableCredentialError(
            f"Too many iterations: {change.iterations} (at most {MAX_ITERATIONS})"
        )
    if not change.salt or not change.salted_password:
        raise UnacceptableCredentialError("a credential needs a salt and a salted password")
    credential = credential_of(
        change.mechanism, change.salted_password, change.salt, change.iterations
    )
    return UserScramCredentialRecord(
        change.name, change.mechanism, credential.salt, credential.stored_key,
        credential.server_key, credential.iterations,
    )


def apply(
    credentials: dict[str, dict[int, ScramCredential]],
    record: ScramRecord,
) -> None:
    """One committed SCRAM record applied to the image's credentials."""
    if isinstance(record, UserScramCredentialRecord):
        credentials.setdefault(record.name, {})[record.mechanism] = ScramCredential(
            record.salt, record.stored_key, record.server_key, record.iterations
        )
        return
    user = credentials.get(record.name, {})
    user.pop(record.mechanism, None)
    if not user:
        credentials.pop(record.name, None)
