"""An idempotent producer's state: its id and epoch, and the sequence numbers of each
partition's batches (Kafka's TransactionManager, without transactions).

The producer gets an id and epoch from InitProducerId and numbers each partition's records; a
batch keeps its sequence across retries, so a leader (also a new one, which rebuilds the state
from its log) acknowledges a retried batch it already holds with the original offsets instead
of writing it twice. Kafka's reactions: DUPLICATE_SEQUENCE_NUMBER is a success whose offsets are
unknown (-1); OUT_OF_ORDER_SEQUENCE_NUMBER is retried while an earlier batch of the partition is
unresolved, and when it is a real gap (or UNKNOWN_PRODUCER_ID) the producer takes a new epoch
and restarts every partition's sequences (KIP-360); a batch that fails for good after it was
numbered also leaves a gap, handled the same way. Everything here runs under the producer's
lock.

A gap is judged by what the batch was sent behind, not by what is acknowledged when its answer
comes. Kafka's broker reads a connection's requests one after another, so a refused batch that
is next after the last acknowledged one means the leader lost the sequence. gRPC serves a
connection's requests side by side, and a batch may reach the leader ahead of one sent before
it: refused as out of sequence, while the one it overtook is written and acknowledged before
the refusal is read. Judged by the acknowledgements, that batch looked "next" and the producer
took a new epoch, failing every batch it had in flight with their outcome unknown (three runs in
nine at 6,000 records/s on a healthy cluster). A batch sent behind unanswered ones is only sent
again, at once, when they are answered.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tidelog import wire
from tidelog.connections import Attempts, Connections
from tidelog.errors import (
    DuplicateSequenceNumberError,
    OutOfOrderSequenceNumberError,
    RetriableError,
    TidelogError,
    UnknownProducerIdError,
    UnsupportedVersionError,
)
from tidelog.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from tidelog.retry import Deadline, call_with_retry

if TYPE_CHECKING:
    from tidelog.producer.accumulator import Batch, PartitionQueue

SEQUENCE_WRAP = 1 << 31


class Verdict(enum.Enum):
    """What a failed batch's error means for an idempotent producer, beyond its class."""

    #: The leader already holds the batch: a success (offsets unknown).
    DUPLICATE = "duplicate"
    #: A sequence error that a new epoch cures (a real gap), or that a retry may (the batch
    #: went first but an earlier one is unresolved): retried either way.
    SEQUENCE = "sequence"
    #: A sequence error of a batch sent while batches ahead of it were unanswered: it reached
    #: the leader before one of them. Sent again as soon as they are answered.
    OVERTAKEN = "overtaken"
    #: Nothing particular: the error's class decides.
    NONE = "none"


class IdempotenceState:
    """The producer id, epoch and sequence bookkeeping; inert without idempotence."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        #: A (new) id and epoch must be fetched before anything more is sent.
        self.needs_producer_id = enabled
        #: When the next InitProducerId may be tried (after a retriable failure).
        self.init_at = 0.0

    def leaving(self, batch: Batch, state: PartitionQueue) -> None:
        """A batch is sent (before it joins `state.in_flight`): its base sequence if it leaves
        for the first time (or after a reset), and whether it goes behind unanswered ones."""
        if self.enabled:
            if batch.sequence is None:
                batch.sequence = state.next_sequence
                state.next_sequence = (state.next_sequence + batch.count) % SEQUENCE_WRAP
            batch.sent_behind = bool(state.in_flight)

    def stamp(self, batch: Batch) -> tuple[int, int, int]:
        """(producer id, epoch, base sequence) that the batch leaves with."""
        sequence = NO_SEQUENCE if batch.sequence is None else batch.sequence
        return self.producer_id, self.producer_epoch, sequence

    def acknowledged(self, batch: Batch, state: PartitionQueue) -> None:
        if batch.sequence is not None:
            end = (batch.sequence + batch.count) % SEQUENCE_WRAP
            if seq_after(end, state.acked_sequence):
                state.acked_sequence = end

    def failed(self, batch: Batch) -> None:
        """A batch failed for good: once numbered, its sequences are a gap."""
        if batch.sequence is not None:
            self.needs_producer_id = True

    def verdict(self, batch: Batch, state: PartitionQueue, error: TidelogError) -> Verdict:
        if isinstance(error, DuplicateSequenceNumberError):
            return Verdict.DUPLICATE
        if isinstance(error, OutOfOrderSequenceNumberError | UnknownProducerIdError):
            if batch.sent_behind:
                return Verdict.OVERTAKEN
            if batch.sequence == state.acked_sequence:
                self.needs_producer_id = True  # a real gap: new epoch, sequences from 0
            return Verdict.SEQUENCE
        return Verdict.NONE

    def new_epoch(
        self, producer_id: int, epoch: int, partitions: Iterable[PartitionQueue]
    ) -> list[Batch]:
        """Adopt a new id/epoch and restart every partition's sequences at 0. Returns the
        queued batches that were already sent: one may be in the log with its answer lost, and
        renumbered under the new epoch the leader could not recognise it and would write it
        twice, so its outcome is unknown and it must fail, as Kafka does."""
        self.producer_id, self.producer_epoch = producer_id, epoch
        sent: list[Batch] = []
        for state in partitions:
            sent += [b for b in state.queue if b.attempts > 0]
            state.next_sequence = state.acked_sequence = 0
            for batch in state.queue:
                batch.sequence = None
        self.needs_producer_id = False
        return sent


def explain_init_failure(exc: TidelogError) -> TidelogError:
    if not isinstance(exc, UnsupportedVersionError):
        return exc
    return type(exc)(
        f"idempotent producing needs InitProducerId, which this cluster does not support "
        f"({exc}); create the producer with idempotent=False"
    )


def seq_after(a: int, b: int) -> bool:
    """Whether sequence a is after b, allowing for the wrap at 2**31."""
    return a != b and (a - b) % SEQUENCE_WRAP < SEQUENCE_WRAP // 2


def init_producer_id(
    connections: Connections, producer_id: int = -1, producer_epoch: int = -1,
    deadline: Deadline | None = None,
) -> tuple[int, int]:
    """A producer id and epoch for idempotent producing (any node forwards the request to the
    controller); pass the current ones to get a new epoch (KIP-360)."""
    deadline = deadline or connections.deadline()
    state = Attempts(connections.metadata.cluster.version)

    def attempt() -> tuple[int, int]:
        response = connections.controller_call(
            "InitProducerId",
            lambda: wire.init_producer_id_request(producer_id, producer_epoch),
            deadline,
            state,
        )
        try:
            return wire.parse_init_producer_id(response)
        except RetriableError:
            state.refresh = True
            raise

    return call_with_retry(
        attempt, what="InitProducerId", deadline=deadline, backoff=connections.backoff
    )
