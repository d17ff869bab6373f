"""A producer's answers handled without processes: a batch refused as out of sequence because
it reached the leader ahead of one sent before it (gRPC serves a connection's requests side by
side) is sent again without a new epoch, even when the batch it overtook is acknowledged before
the refusal is read; a refused batch that went first is a real gap; an answer to a batch the
producer already failed changes nothing."""

from __future__ import annotations

import threading
import time

from tidelog import ProducerConfig, TopicPartition, wire
from tidelog.connections import ClientConfig, Connections
from tidelog.errors import (
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
    UnknownProducerIdError,
)
from tidelog.producer.accumulator import Batch, PartitionQueue, RecordAccumulator
from tidelog.producer.idempotence import IdempotenceState, Verdict
from tidelog.producer.sender import Sender

TP = TopicPartition("t", 0)


def _producer() -> IdempotenceState:
    state = IdempotenceState(True)
    state.producer_id, state.producer_epoch, state.needs_producer_id = 7, 0, False
    return state


def _send(idempotence: IdempotenceState, queue: PartitionQueue, serial: int) -> Batch:
    """A batch of 15 records leaving now, as `RecordAccumulator.ready` sends one."""
    batch = Batch(TP, 0.0, 60.0, serial, threading.RLock(), count=15)
    idempotence.leaving(batch, queue)
    queue.in_flight.append(batch)
    return batch


def test_a_batch_that_overtook_an_earlier_one_is_sent_again_without_a_new_epoch() -> None:
    idempotence, queue = _producer(), PartitionQueue(TP)
    first, second = _send(idempotence, queue, 0), _send(idempotence, queue, 1)
    # The second reached the leader first and was refused; the first was written, and its
    # answer read, before the refusal was.
    queue.in_flight.remove(first)
    idempotence.acknowledged(first, queue)
    assert second.sequence == queue.acked_sequence  # what made it look like a lost sequence
    refused = OutOfOrderSequenceNumberError("t-0: producer 7: expected sequence 0, got 15")
    assert idempotence.verdict(second, queue, refused) is Verdict.OVERTAKEN
    assert not idempotence.needs_producer_id


def test_a_refused_batch_that_went_first_is_a_lost_sequence() -> None:
    idempotence, queue = _producer(), PartitionQueue(TP)
    for error in (OutOfOrderSequenceNumberError("expected sequence 30, got 0"),
                  UnknownProducerIdError("producer 7 unknown")):
        alone = _send(idempotence, queue, 0)
        queue.in_flight.remove(alone)
        alone.sequence = queue.acked_sequence
        assert idempotence.verdict(alone, queue, error) is Verdict.SEQUENCE
        assert idempotence.needs_producer_id
        idempotence.needs_producer_id = False


def test_a_batch_sent_behind_others_counts_as_sent_behind_only_for_that_send() -> None:
    """A retry leaves alone (`RecordAccumulator.ready`: nothing else in flight), so a batch
    overtaken once and refused again on its retry is a real gap."""
    idempotence, queue = _producer(), PartitionQueue(TP)
    first, second = _send(idempotence, queue, 0), _send(idempotence, queue, 1)
    assert (first.sent_behind, second.sent_behind) == (False, True)
    queue.in_flight.clear()
    idempotence.acknowledged(first, queue)
    idempotence.leaving(second, queue)  # the retry
    assert not second.sent_behind
    refused = OutOfOrderSequenceNumberError("expected sequence 30, got 15")
    assert idempotence.verdict(second, queue, refused) is Verdict.SEQUENCE
    assert idempotence.needs_producer_id


def test_a_late_answer_to_a_batch_already_failed_changes_nothing() -> None:
    """Closing a producer fails its batches, those in flight too; an answer that comes back
    afterwards (its call was under way) must leave the batch as it is. Before, a retriable
    answer put the failed batch back in its queue, and the sender's call task died on the
    in-flight list the batch was no longer in (a traceback when Ctrl-C ended `tidelog
    produce`)."""
    connections = Connections(ClientConfig(bootstrap=("127.0.0.1:9",)))
    try:
        idempotence = IdempotenceState(False)
        accumulator = RecordAccumulator(connections, ProducerConfig(), idempotence)
        sender = Sender(connections, accumulator, idempotence)
        queue = accumulator._partitions.setdefault(TP, PartitionQueue(TP))
        now = time.monotonic()
        batch = Batch(TP, now, now + 60.0, 0, accumulator._lock, count=1)
        queue.in_flight.append(batch)
        closed = RequestTimedOutError("the producer was closed before delivery")
        with accumulator._lock:
            accumulator.fail_all(closed)
        late = wire.Failure(NotLeaderOrFollowerError("t-0: not the leader"))
        sender._handle({TP: batch}, {TP: late}, 1)
        assert batch.error is closed
        assert not queue.queue and not queue.in_flight
    finally:
        connections.close()
