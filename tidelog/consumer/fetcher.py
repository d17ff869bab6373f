"""The consumer's fetcher: Fetch long polls to the assigned partitions' leaders, one request
per leader, and the records fetched and not yet handed out.

The batches are decoded only here, at the end of the path (design notes). As Kafka's consumer
does, ``poll()`` sends the next Fetch for the partitions it has nothing left of before it
returns records, so the network and the node's read overlap with the application's work and
the next poll's decoding; an answer is taken only for a partition whose position is still the
one it was fetched from and that was not paused or unassigned meanwhile (`_Round`). Control
batches (epoch markers, transaction markers) advance the position but are never returned;
under read_committed, batches of aborted transactions are dropped with Kafka's algorithm (the
aborted list of the answer, closed by each producer's ABORT marker).

Not thread-safe on its own: the consumer's lock guards it.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tidelog import wire
from tidelog.consumer.config import ConsumerConfig
from tidelog.consumer.positions import Positions
from tidelog.errors import (
    CorruptMessageError,
    CorruptRecordError,
    OffsetOutOfRangeError,
    RetriableError,
    TidelogError,
    UnsupportedCompressionTypeError,
)
from tidelog.partitioned import Attempt, PartitionedRequest
from tidelog.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    ControlType,
    check_crc,
    consumer_records,
    control_type_of,
    read_header,
)
from tidelog.retry import Deadline
from tidelog.types import ConsumerRecord, IsolationLevel, TopicPartition

if TYPE_CHECKING:
    from tidelog.connections import Connections

#: A Fetch RPC may take its long-poll wait plus this much.
_RPC_SLACK_S = 5.0


@dataclass(slots=True)
class _Fetched:
    """A partition's records fetched and not yet handed out: ``records[at:]``, decoded, then
    those of the data batches of `data` listed in `batches`, each with the position before it
    (where the consumer stands once the records before it are handed out). As Kafka's
    CompletedFetch does, a batch is checked and decoded only when poll() needs its records:
    the ConsumerRecords are built just before they are returned and die with the
    application's use of them, rather than waiting in the buffer for later polls (about a
    fetch's worth of objects that every young garbage collection would walk again), and a
    value is still in the CPU's cache when the application reads it."""

    data: bytes
    batches: collections.deque[tuple[int, BatchHeader, int]]
    records: list[ConsumerRecord] = field(default_factory=list)
    at: int = 0
    #: The partitions whose records came in the same answer (this one included): none of
    #: them is fetched again while this one has records left (`Fetcher.fetchable`).
    mates: frozenset[TopicPartition] = frozenset()

    def position(self) -> int:
        """The offset of the next record handed out (or of the next batch's first)."""
        if self.at < len(self.records):
            return self.records[self.at].offset
        return self.batches[0][2]


@dataclass(slots=True)
class _Round:
    """A Fetch in flight to one leader: the positions it asked for, and the
    partitions whose answers are still wanted. A seek, a pause or the end of the assignment
    takes a partition out of `live` (`Fetcher.forget`): its answer is then dropped, and it
    may be fetched again at once."""

    future: concurrent.futures.Future[Attempt[wire.FetchAnswer]]
    work: dict[TopicPartition, wire.FetchPosition]
    live: set[TopicPartition]


class Fetcher:
    """Fetches the positions of `Positions` and buffers what comes back."""

    def __init__(
        self,
        connections: Connections,
        config: ConsumerConfig,
        isolation_level: IsolationLevel,
        positions: Positions,
    ) -> None:
        self.connections = connections
        self.config = config
        self.isolation_level = isolation_level
        self.positions = positions
        self.failed_rounds = 0
        #: A bad batch met after records were already taken: raised by the next poll round.
        self.corrupt: CorruptRecordError | None = None
        #: Records fetched but not yet returned (beyond max_poll_records), by partition; such
        #: a partition is not fetched again until they are, and its position
        #: (`Positions.offsets`) is then the offset after them.
        self.buffer: dict[TopicPartition, _Fetched] = {}
        #: Fetch rounds in flight; a partition is in at most one round's `live` set.
        self.rounds: list[_Round] = []
        #: Each partition's high watermark as its last Fetch answer taken said.
        self.highwaters: dict[TopicPartition, int] = {}

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment (`Positions.assign`); what was fetched for a partition
        dropped goes with it."""
        for tp in self.positions.assign(partitions):
            self.drop(tp)

    def drop(self, tp: TopicPartition) -> None:
        """Drop what was fetched for `tp`, buffered or in flight (seeked or unassigned)."""
        self.buffer.pop(tp, None)
        self.forget(tp)

    def position(self, tp: TopicPartition) -> int | None:
        """The offset of the next record the application gets: the first buffered one, else
        where the next Fetch starts."""
        buffered = self.buffer.get(tp)
        return buffered.position() if buffered else self.positions.offsets[tp]

    def idle(self) -> bool:
        """Whether no Fetch is in flight and none can be sent: every assigned partition (if
        any) is paused or has records buffered."""
        return not self.rounds and all(
            tp in self.positions.paused or tp in self.buffer for tp in self.positions.offsets
        )

    def close(self) -> None:
        """Cancel the Fetches in flight."""
        for rnd in self.rounds:
            rnd.future.cancel()
        self.rounds = []

    def await_leaders(
        self, failed_leaders: dict[TopicPartition, tuple[int, int]], deadline: Deadline
    ) -> None:
        """One more failed round: the backoff after a round that needs new metadata (growing
        with the rounds failed in a row), spent watching for the new leaders
        (`MetadataSource.await_new_leaders`)."""
        self.failed_rounds += 1
        self.connections.metadata.await_new_leaders(
            failed_leaders, self.connections.backoff.delay_s(self.failed_rounds), deadline,
        )
        with contextlib.suppress(RetriableError):
            self.connections.metadata.check_described(
                (tp.topic for tp in self.positions.offsets), self.connections.deadline()
            )

    def fetchable(self) -> dict[TopicPartition, int]:
        """The positions to fetch: partitions with one, not paused, with nothing buffered and
        no Fetch in flight, whose last answer's other partitions have nothing buffered either
        (unless paused): a leader's partitions drained one after the other are fetched
        again together, in one request, rather than one request each (half the Fetch
        requests, and their cost on the node and in the client, for a consumer reading two
        partitions of a leader), while the records still buffered keep poll() busy."""
        paused = self.positions.paused
        in_flight = set().union(*(rnd.live for rnd in self.rounds))
        held = set().union(*(
            buffered.mates for tp, buffered in self.buffer.items() if tp not in paused
        ))
        return {
            tp: position for tp, position in self.positions.offsets.items()
            if position is not None and tp not in paused and tp not in held
            and tp not in self.buffer and tp not in in_flight
        }

    def forget(self, tp: TopicPartition) -> None:
        """Drop the answer of any Fetch in flight for `tp` (seeked, paused or unassigned)."""
        for rnd in self.rounds:
            rnd.live.discard(tp)

    def drain(self, max_records: int) -> list[ConsumerRecord]:
        """Up to `max_records` buffered records of unpaused partitions, partition after
        partition, decoding their batches as they are needed (`_Fetched`); each partition's
        commit epoch becomes that of its last record handed out.

        A batch whose records cannot be read stops its partition there, as in `take`: the
        records before it are handed out, the position goes back to it, and the
        CorruptRecordError waits in `corrupt` for the next round of poll()."""
        out: list[ConsumerRecord] = []
        for tp, buffered in list(self.buffer.items()):
            if len(out) >= max_records:
                break
            if tp in self.positions.paused:
                continue
            taken: list[ConsumerRecord] = []
            while len(out) + len(taken) < max_records:
                at = buffered.at
                if at == len(buffered.records):
                    if not buffered.batches:
                        break
                    pos, header, position = buffered.batches.popleft()
                    try:
                        buffered.records = consumer_records(
                            buffered.data, pos, header, tp, position
                        )
                    except (CorruptMessageError, UnsupportedCompressionTypeError) as exc:
                        self.corrupt = _corrupt_at(tp, position, buffered.data, pos, exc)
                        self.positions.offsets[tp] = position
                        buffered.records, buffered.batches = [], collections.deque()
                        buffered.at = 0
                        break
                    buffered.at = at = 0
                more = buffered.records[at : at + max_records - len(out) - len(taken)]
                buffered.at = at + len(more)
                taken += more
            if buffered.at == len(buffered.records) and not buffered.batches:
                del self.buffer[tp]
            if taken:
                if taken[-1].leader_epoch >= 0:
                    self.positions.epochs[tp] = taken[-1].leader_epoch
                out += taken
        return out

    def send_round(self, max_wait_ms: int) -> bool:
        """Send one Fetch per leader for the fetchable partitions (`fetchable`), on the
        client's loop, without waiting; False when there are none. Each leader's Fetch is a
        round of its own, taken as soon as it is answered, as Kafka's consumer fetches from
        each node apart: a long poll on a leader with nothing new holds back no other's
        records."""
        work = {
            tp: wire.FetchPosition(position, self.connections.metadata.cluster.leader_epoch(tp))
            for tp, position in self.fetchable().items()
        }
        if not work:
            return False
        request: PartitionedRequest[wire.FetchPosition, wire.FetchAnswer] = PartitionedRequest(
            self.connections.transport,
            self.connections.metadata,
            self.connections.backoff,
            "Fetch",
            "Fetch",
            lambda positions: wire.fetch_request(
                positions,
                isolation=self.isolation_level,
                max_wait_ms=max_wait_ms,
                min_bytes=self.config.fetch_min_bytes,
                max_bytes=self.config.fetch_max_bytes,
                partition_max_bytes=self.config.max_partition_fetch_bytes,
            ),
            wire.parse_fetch,
        )
        groups, leaderless = request.by_leader(work)
        for tps in [*groups.values(), list(leaderless)]:
            if tps:  # the leaderless ones fail at once, asking for new metadata
                part = {tp: work[tp] for tp in tps}
                future = self.connections.transport.submit(
                    request.attempt(part, max_wait_ms / 1000 + _RPC_SLACK_S)
                )
                self.rounds.append(_Round(future, part, set(part)))
        return True

    def collect(self) -> tuple[bool, dict[TopicPartition, tuple[int, int]] | None]:
        """Take the answers of the rounds that have come back into the buffer: whether any
        had, and when metadata must be refreshed before the next round, the (leader, epoch)
        that failed each partition that needs it (None when none does). A partition's answer
        (records or error) counts only if it is still live and still at the position it was
        fetched from; a final error raises, after the round's records are buffered."""
        failed: dict[TopicPartition, tuple[int, int]] | None = None
        done = [rnd for rnd in self.rounds if rnd.future.done()]
        for rnd in done:
            self.rounds.remove(rnd)
            outcome = rnd.future.result()
            wanted = {
                tp for tp in rnd.live if self.positions.offsets.get(tp) == rnd.work[tp].offset
            }
            for tp, answer in outcome.answers.items():
                if tp in wanted:
                    self.take(tp, rnd.work[tp].offset, answer)
            mates = frozenset(tp for tp in outcome.answers if tp in wanted and tp in self.buffer)
            for tp in mates:
                self.buffer[tp].mates = mates
            if outcome.refresh:
                failed = {**(failed or {}), **outcome.failed_leaders}
            for tp, error in sorted(outcome.final.items()):
                if tp not in wanted:
                    continue
                reset = self.positions.reset_spec
                if not isinstance(error, OffsetOutOfRangeError) or reset is None:
                    raise error
                self.positions.offsets[tp] = None  # auto_offset_reset at the next round
        return bool(done), failed

    def take(self, tp: TopicPartition, position: int, answer: wire.FetchAnswer) -> None:
        """Buffer the answer's data batches from `position` (decoded by `drain` as poll()
        needs them), advancing the position past control batches and (read_committed)
        aborted ones.

        Every batch is checked (CRC here, every record's framing when it is decoded) before
        its records are taken, as Kafka's consumer does with check.crcs. A batch that fails
        stops the walk: the records before it are returned, the position stays on it, and the
        CorruptRecordError waits in `corrupt` for the next round of poll() (Kafka's
        behaviour: nothing is skipped silently, and nothing already decoded is lost)."""
        self.highwaters[tp] = answer.high_watermark
        data = answer.records
        committed_only = self.isolation_level is IsolationLevel.READ_COMMITTED
        aborted = [(first, pid) for pid, first in answer.aborted] if committed_only else []
        heapq.heapify(aborted)
        aborted_producers: set[int] = set()
        batches: collections.deque[tuple[int, BatchHeader, int]] = collections.deque()
        pos = 0
        while len(data) - pos >= HEADER_SIZE:
            size = _batch_size(data, pos)
            if pos + size > len(data) and pos and size >= HEADER_SIZE:
                break  # a partial batch after whole ones: fetched again from here next time
            try:
                header = read_header(data, pos)
                if header.next_offset > position:
                    check_crc(data, pos, header)
                    while aborted and aborted[0][0] <= header.last_offset:
                        aborted_producers.add(heapq.heappop(aborted)[1])
                    if header.is_control:
                        if control_type_of(data, pos, header) == ControlType.ABORT:
                            aborted_producers.discard(header.producer_id)
                    elif not (header.is_transactional and header.producer_id in aborted_producers):
                        batches.append((pos, header, position))
                    position = header.next_offset
            except (CorruptMessageError, UnsupportedCompressionTypeError) as exc:
                self.corrupt = _corrupt_at(tp, position, data, pos, exc)
                break
            pos += header.size
        self.positions.offsets[tp] = position
        if batches:
            self.buffer[tp] = _Fetched(data, batches)

    def raise_corrupt(self) -> None:
        """Raise the CorruptRecordError a previous round met, unless its partition was seeked
        or unassigned since (the application already chose what to do)."""
        corrupt, self.corrupt = self.corrupt, None
        if corrupt is not None:
            tp = TopicPartition(corrupt.topic, corrupt.partition)
            if tp in self.buffer:  # the records before the bad batch come first
                self.corrupt = corrupt
            elif self.positions.offsets.get(tp) == corrupt.offset:
                raise corrupt


def _corrupt_at(
    tp: TopicPartition, position: int, data: bytes, pos: int, exc: TidelogError
) -> CorruptRecordError:
    """The consumer's error for the bad batch at `pos`, saying how to skip it if its header
    still says where it ends."""
    try:
        skip = f"; seek to {read_header(data, pos).next_offset} to skip the batch"
    except CorruptMessageError:
        skip = ""
    return CorruptRecordError(
        tp.topic, tp.partition, position, f"the fetched batch cannot be read ({exc}){skip}"
    )


def _batch_size(data: bytes, pos: int) -> int:
    """The whole size of the batch at `pos`, read from its length field."""
    return int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True) + LOG_OVERHEAD
