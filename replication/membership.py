"""Who belongs to a partition's Raft group, and how that changes: voters, learners, and
membership changes as log entries.

A **voter** counts in election and commit quorums. A **learner** receives the log like any
follower but is counted in no quorum and never campaigns: a new replica joins as one, catches
up, and only then is promoted, so a replica that holds nothing never weighs on a quorum.

**One change at a time, not joint consensus.** Every change adds a learner, promotes a learner
to voter, or removes one member (Raft dissertation §4.1, with learners as etcd has them). A
change moves the voter set by one node at most, so every majority of the old voter set
intersects every majority of the new one: replicas that use either configuration, in any mix,
can never elect two leaders in one term nor commit two different entries at one offset. That
is the whole safety argument, and it needs no change to the quorum arithmetic: an election, a
commit, check-quorum and a read's confirmation each ask one `MajorityConfig`. Joint consensus
(etcd's ConfChangeV2) would let one step replace a voter outright, at the cost of a second
configuration in every one of those decisions, two entries per change (C_old,new then C_new)
and rules for leaving the joint state; a replica move, the one thing the controller needs, is
learner, promote, remove either way, and passes through four voters (quorum three: one failure
tolerated, as with three) instead of a joint 3+3. Adds before removes keep that margin: a
replacement that removed first would pass through two voters, which tolerate none.

**Rules**, enforced by `RaftCore.propose_conf_change` (`ConfChangeError` otherwise):

* one change pending at a time: a leader proposes a change only when every configuration entry
  in its log is committed;
* a leader proposes a change only after committing an entry of its own term (the fix to §4.1's
  single-server changes, Ongaro, raft-dev 2015): otherwise a configuration appended by an
  earlier leader, not in this leader's log, could still be committed beside this leader's, two
  changes apart. A leader elected with HW == LEO writes no marker (contract §7), so a change asked
  for before its first commit appends the marker itself and is refused as retriable;
* the last voter cannot be removed, and a change must change something.

**When it takes effect: on append.** Every replica uses the newest configuration in its log,
committed or not (dissertation §4.1): the leader counts the new voter set from the moment it
appends the entry; a truncation that removes the entry reverts to the one before. **On commit**
the entry becomes the committed configuration (`ConfState`): it is persisted, the next change
may be proposed, and a leader that is no longer a voter steps down (it kept replicating, not
counting itself, while the change was pending), handing over at once to a voter that holds its
whole log. Whoever orchestrates a removal moves leadership off the leaving replica first
(`RaftCore.transfer_leadership`) when it can; stepping down is the fallback.

**Persistence.** The committed `ConfState` reaches the replica's store in the Ready whose HW
first covers its entry (`Ready.conf_state`), so it is durable before that HW is published: a
restart takes it from the store and finds any newer (uncommitted) entry in the log above the HW
the store recovered. A follower whose log is reset to the leader's log start (retention removed
what it lacked) gets the leader's committed configuration with the append that resets it.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from tidelog.errors import CorruptMessageError
from tidelog.records import ATTR_CONTROL, ControlType, decode_records, read_header


class ConfChangeError(ValueError):
    """A membership change that cannot be proposed now. ``retriable``: it may succeed later on
    this leader (a change is pending, or its first commit of the term is not done yet)."""

    def __init__(self, reason: str, retriable: bool = False) -> None:
        super().__init__(reason)
        self.retriable = retriable


class ConfChangeType(enum.Enum):
    ADD_LEARNER = "add-learner"
    PROMOTE = "promote"
    REMOVE = "remove"


@dataclass(frozen=True, slots=True)
class ConfChange:
    type: ConfChangeType
    node: int


@dataclass(frozen=True, slots=True)
class Membership:
    """A configuration: sorted, disjoint voter and learner ids."""

    voters: tuple[int, ...]
    learners: tuple[int, ...] = ()

    @classmethod
    def of(cls, voters: Iterable[int], learners: Iterable[int] = ()) -> Membership:
        v = tuple(sorted(set(voters)))
        learner_set = set(learners)
        if learner_set & set(v):
            raise ValueError(f"nodes {sorted(learner_set & set(v))} are voters and learners")
        if any(n < 0 for n in v) or any(n < 0 for n in learner_set):
            raise ValueError("node ids are not negative")
        return cls(v, tuple(sorted(learner_set)))

    @property
    def members(self) -> tuple[int, ...]:
        return tuple(sorted(self.voters + self.learners))

    def apply(self, change: ConfChange) -> Membership:
        """The configuration after ``change``; `ConfChangeError` when it is illegal here."""
        node = change.node
        if change.type is ConfChangeType.ADD_LEARNER:
            if node in self.voters or node in self.learners:
                raise ConfChangeError(f"node {node} is already a member")
            return Membership.of(self.voters, (*self.learners, node))
        if change.type is ConfChangeType.PROMOTE:
            if node not in self.learners:
                raise ConfChangeError(f"node {node} is not a learner")
            return Membership.of((*self.voters, node), (n for n in self.learners if n != node))
        if node in self.learners:
            return Membership.of(self.voters, (n for n in self.learners if n != node))
        if node not in self.voters:
            raise ConfChangeError(f"node {node} is not a member")
        if len(self.voters) == 1:
            raise ConfChangeError(f"node {node} is the last voter")
        return Membership.of((n for n in self.voters if n != node), self.learners)


@dataclass(frozen=True, slots=True)
class ConfState:
    """A configuration and the offset of the log entry that holds it (-1: the bootstrap
    configuration the replica was created with, which no entry holds)."""

    offset: int
    membership: Membership


def majorities_intersect(a: Membership, b: Membership) -> bool:
    """Whether every majority of ``a``'s voters shares a node with every majority of ``b``'s.
    Two disjoint majorities exist when each side can fill its quorum from the nodes only it has
    plus its share of the common ones."""
    va, vb = set(a.voters), set(b.voters)
    qa, qb = len(va) // 2 + 1, len(vb) // 2 + 1
    need = max(0, qa - len(va - vb)) + max(0, qb - len(vb - va))
    return need > len(va & vb)


# ---- configurations in the log ------------------------------------------------------------

_COUNT = struct.Struct(">hi")  # version, voter count
_ID = struct.Struct(">i")
#: Offset of the attributes' low byte in a batch header.
_ATTRIBUTES_LOW = 22


def encode_membership(membership: Membership) -> bytes:
    """A configuration record's value: version 0, the voters (int32 count, then int32 ids),
    then the learners the same way."""
    ids = [*membership.voters, *membership.learners]
    return b"".join([_COUNT.pack(0, len(membership.voters)), _ID.pack(len(membership.learners)),
                     *(_ID.pack(i) for i in ids)])


def decode_membership(value: bytes) -> Membership:
    """The inverse of `encode_membership`; CorruptMessageError for any other bytes."""
    try:
        version, voters = _COUNT.unpack_from(value)
        (learners,) = _ID.unpack_from(value, _COUNT.size)
        start = _COUNT.size + _ID.size
        if version != 0 or voters < 0 or learners < 0 or \
                len(value) != start + _ID.size * (voters + learners):
            raise ValueError(f"version {version}, {voters} voters, {learners} learners in "
                             f"{len(value)} bytes")
        ids = [_ID.unpack_from(value, start + _ID.size * k)[0] for k in range(voters + learners)]
        return Membership.of(ids[:voters], ids[voters:])
    except (struct.error, ValueError) as exc:
        raise CorruptMessageError(f"malformed configuration record: {exc}") from None


def membership_of(data: bytes | memoryview) -> Membership | None:
    """The configuration a batch holds, None for any other batch; CorruptMessageError for a
    configuration batch that does not decode. Asked of every appended batch: one byte decides
    for all but control batches."""
    if len(data) <= _ATTRIBUTES_LOW or not data[_ATTRIBUTES_LOW] & ATTR_CONTROL:
        return None
    records = decode_records(data, 0, read_header(data))
    key = records[0].key if records else None
    if key is None or len(key) < 4 or int.from_bytes(key[2:4]) != ControlType.MEMBERSHIP:
        return None
    return decode_membership(records[0].value or b"")
