"""The client side of a chaos run: idempotent acks=all producers of unique values; consumers
that look offsets up (earliest, latest, max and by time, under both isolation levels), seek to
the answer and poll; committers of consumer offsets and fetchers of them; all recorded in the
history.

Committed offsets are a register per (group, partition). Every commit writes one value, unique
in the run, to every partition of the topic at once (one set), so a fetch of the whole set that
sees two values has seen part of a commit, and a value names the one commit that wrote it.
Fetchers ask a random node, which forwards to the coordinator when it is not one.

Both use the real client library: the point is to see what a user of it would see. What the
library does not report, the node that answered, comes from a ``Tracer``, which each client
is given as an observer (the client's public hook for seeing its traffic).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import functools
import itertools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidelog import wire
from tidelog.chaos.history import FAIL, OK, UNKNOWN, History
from tidelog.client import Client
from tidelog.clock import wall_clock_ms
from tidelog.errors import RetriableError, TidelogError
from tidelog.hashing import group_partition
from tidelog.member_history import MemberProcess
from tidelog.producer import RecordFuture
from tidelog.records import read_header
from tidelog.transport import CallObserver
from tidelog.types import IsolationLevel, OffsetAndMetadata, OffsetSpec, TopicPartition
from tidelog.v1 import tidelog_pb2 as pb

__all__ = ["AckInfo", "Tracer", "Workload", "WorkloadConfig", "offset_groups"]

#: Kinds of ListOffsets lookups consumers make, each with the spec it sends.
LOOKUPS = ("earliest", "latest", "max", "timestamp")
#: The consumer group of the member processes.
MEMBER_GROUP = "chaos-members"
#: How long the other members stay paused while one joins: long enough for the joiner to get
#: what the coordinator should not give it yet, and well under the run's session timeout
#: (chaos/run.py), so that none of the paused ones is fenced.
MEMBER_JOIN_HOLD_S = 2.0
#: What a member process may take to start and connect (an interpreter on a loaded machine).
_MEMBER_START_S = 30.0
#: What the members may take to own every partition between two member faults.
_MEMBERS_SETTLE_S = 20.0
#: Records of one poll kept in the history: enough to compare reads with the final log.
_POLL_RECORDS_KEPT = 200


@dataclass(frozen=True)
class AckInfo:
    """Who acknowledged one record, and whether its batch was sent only once: a batch sent
    again may be acknowledged by a later leader as a duplicate of what an earlier one wrote."""

    node: int
    single_send: bool


class Tracer(CallObserver):
    """Which node answered: the last answer of any kind (the one client it observes belongs to
    one thread, which reads it right after a synchronous lookup) and, for Produce, every
    acknowledged offset. Produce answers reach it on the client's loop before the producer
    completes the records' futures, so the futures' callbacks find their offsets here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last_node: int | None = None
        #: (tp, producer id, epoch, base sequence) -> how many times that batch was sent.
        self._sends: collections.Counter[tuple[TopicPartition, int, int, int]] = (
            collections.Counter()
        )
        self._acks: dict[tuple[TopicPartition, int], AckInfo] = {}

    def on_request(self, node_id: int | None, method: str, request: Any) -> None:
        if method == "ProduceSerialized":
            with self._lock:
                for tp, (pid, epoch, sequence, _) in _batches(request).items():
                    self._sends[(tp, pid, epoch, sequence)] += 1

    def on_response(self, node_id: int | None, method: str, request: Any, response: Any) -> None:
        self.last_node = node_id
        if method != "ProduceSerialized" or node_id is None:
            return
        batches = _batches(request)
        with self._lock:
            for tp, answer in wire.parse_produce(response).items():
                if not isinstance(answer, wire.ProduceAnswer) or answer.base_offset < 0:
                    continue
                pid, epoch, sequence, count = batches[tp]
                info = AckInfo(node_id, self._sends[(tp, pid, epoch, sequence)] == 1)
                for offset in range(answer.base_offset, answer.base_offset + count):
                    self._acks[(tp, offset)] = info

    def take_ack(self, tp: TopicPartition, offset: int) -> AckInfo | None:
        with self._lock:
            return self._acks.pop((tp, offset), None)


def _batches(request: bytes) -> dict[TopicPartition, tuple[int, int, int, int]]:
    """The batches of a serialized Produce request: (producer id, epoch, base sequence,
    record count) by partition."""
    batches = {}
    for topic in pb.ProduceRequest.FromString(request).topics:
        for part in topic.partitions:
            header = read_header(part.records)
            batches[TopicPartition(topic.name, part.partition)] = (
                header.producer_id, header.producer_epoch, header.base_sequence,
                header.records_count,
            )
    return batches


@dataclass(frozen=True)
class WorkloadConfig:
    topic: str
    partitions: int
    #: Writes per second over all producers.
    rate: float = 100.0
    producers: int = 2
    consumers: int = 2
    #: Writes a producer may have unanswered before it waits (bounds memory during outages).
    max_pending: int = 300
    request_timeout_ms: int = 5_000
    delivery_timeout_ms: int = 20_000
    seed: int = 0
    #: Offset commits per second over all committers (0: no committers, no fetchers).
    commit_rate: float = 20.0
    committers: int = 2
    fetchers: int = 2
    #: Groups committed to, spread over the partitions of __consumer_offsets.
    groups: int = 3
    offsets_partitions: int = 2
    #: Consumer-group member processes (issue 15) subscribed to the topic; 0: none.
    members: int = 0
    #: Every this many seconds (seeded draw around it) a member is SIGKILLed and a new one
    #: started; 0: members are never killed.
    member_kill_interval_s: float = 0.0
    #: Every this many seconds (seeded draw around it) a new member joins while every other
    #: one is paused (SIGSTOP) for MEMBER_JOIN_HOLD_S; 0: never.
    member_join_interval_s: float = 0.0
    #: Transactions per second over all transactional producers (0: none, and no
    #: read_committed readers of them).
    txn_rate: float = 0.0
    txn_producers: int = 1
    txn_readers: int = 2
    #: Share of transactions the producer aborts on purpose.
    txn_abort_share: float = 0.3


class Workload:
    """Producer and consumer threads against the cluster behind ``bootstrap``."""

    def __init__(self, bootstrap: str, config: WorkloadConfig, history: History) -> None:
        self.bootstrap = bootstrap
        self.config = config
        self.history = history
        self.tps = [TopicPartition(config.topic, p) for p in range(config.partitions)]
        self._stop_writes = threading.Event()
        self._stop_reads = threading.Event()
        self._threads: list[threading.Thread] = []
        self._clients: list[Client] = []
        self._pending: dict[str, set[RecordFuture]] = {}
        self._pending_lock = threading.Lock()
        self._producers: list[Any] = []
        self.errors: list[str] = []
        self.groups = offset_groups(config.groups, config.offsets_partitions)
        #: Commit values, unique in the run (itertools.count is safe to share between threads).
        self._commit_values = itertools.count()
        #: Member processes, live and dead, in start order.
        self.members: list[MemberProcess] = []
        self._members_lock = threading.Lock()
        self._stop_members = threading.Event()
        #: Ends the members' nemeses (with the node faults, at the heal).
        self._stop_member_faults = threading.Event()

    def _client(self) -> tuple[Client, Tracer]:
        tracer = Tracer()
        client = Client(self.bootstrap, request_timeout_ms=self.config.request_timeout_ms,
                        observers=[tracer])
        self._clients.append(client)
        return client, tracer

    def start(self) -> None:
        for i in range(self.config.producers):
            self._spawn(f"p{i}", self._produce, f"p{i}")
        for i in range(self.config.consumers):
            self._spawn(f"c{i}", self._consume, f"c{i}", random.Random(f"{self.config.seed}-c{i}"))
        if self.config.commit_rate > 0:
            for i in range(self.config.committers):
                self._spawn(f"oc{i}", self._commit, f"oc{i}",
                            random.Random(f"{self.config.seed}-oc{i}"))
            for i in range(self.config.fetchers):
                self._spawn(f"of{i}", self._fetch_offsets, f"of{i}",
                            random.Random(f"{self.config.seed}-of{i}"))
        if self.config.txn_rate > 0:
            for i in range(self.config.txn_producers):
                self._spawn(f"t{i}", self._transact, f"t{i}",
                            random.Random(f"{self.config.seed}-t{i}"))
            for i in range(self.config.txn_readers):
                self._spawn(f"rc{i}", self._read_committed, f"rc{i}")
        if self.config.members > 0:
            for _ in range(self.config.members):
                self._start_member()
            self._spawn("mf", self._fetch_member_offsets)
            if self.config.member_kill_interval_s > 0:
                self._spawn("mk", self._kill_members, random.Random(f"{self.config.seed}-mk"))
            if self.config.member_join_interval_s > 0:
                self._spawn("mj", self._join_paused, random.Random(f"{self.config.seed}-mj"))

    # ---- consumer-group members ------------------------------------------------------------

    def _start_member(self, *extra: str) -> MemberProcess:
        with self._members_lock:
            member = MemberProcess(self.bootstrap, MEMBER_GROUP, self.config.topic,
                                   f"gm{len(self.members)}", *extra)
            self.members.append(member)
        self.history.info(member.name, "member_start")
        return member

    def _kill_members(self, rng: random.Random) -> None:
        """The members' nemesis: SIGKILL one, start a replacement, again and again."""
        interval = self.config.member_kill_interval_s
        while not self._stop_member_faults.wait(rng.uniform(interval / 2, interval * 3 / 2)):
            live = [m for m in self.members if m.alive]
            if live:
                victim = rng.choice(live)
                victim.kill()
                self.history.info(victim.name, "member_kill")
            self._start_member()

    def _join_paused(self, rng: random.Random) -> None:
        """The members' other nemesis: a new member joins while every other one is paused
        (SIGSTOP, as in a long GC pause) with the partitions they own, resumed once the joiner
        has partitions or after MEMBER_JOIN_HOLD_S. Whatever the joiner is to get, a paused
        member owns and cannot revoke until it is resumed: the coordinator must hold it back
        until then. This is the handover the planted bug (test.groups.grant.before.revoke)
        gets wrong, provoked on purpose: a random one, where the old owner learns of its
        revocation at once, may end before the joiner starts reading."""
        interval = self.config.member_join_interval_s
        while not self._stop_member_faults.is_set():
            # Started ahead, connected but not subscribed until its `go`: its interpreter's
            # start is neither in the pause nor in the run's time.
            joiner = self._start_member("--wait-for-go")
            if self._stop_member_faults.wait(rng.uniform(interval / 2, interval * 3 / 2)):
                joiner.kill()  # never joined: nothing of it in the group
                return
            self._join_while_paused(joiner)

    def _join_while_paused(self, joiner: MemberProcess) -> None:
        if not self._members_until(lambda: joiner.ready, _MEMBER_START_S):
            return
        live = [m for m in self.members if m is not joiner and m.alive]
        partitions = set(range(self.config.partitions))
        covered = self._members_until(
            lambda: partitions <= set().union(*(m.owned for m in live)), _MEMBERS_SETTLE_S)
        for member in live:
            member.pause()
        self.history.info("mj", "member_pause", members=[m.name for m in live],
                          joiner=joiner.name, covered=covered)
        try:
            joiner.send("go")
            self._members_until(lambda: joiner.owned, MEMBER_JOIN_HOLD_S)
        finally:
            for member in live:
                member.resume()
            self.history.info("mj", "member_resume", joiner_owned=sorted(joiner.owned))

    @staticmethod
    def _members_until(condition: Callable[[], object], timeout_s: float) -> bool:
        """Whether `condition()` came true within `timeout_s`. Not cut short when the members
        are being stopped: a join that has begun ends as planned (a slow machine may take
        longer than the run to get there, and a run that asked for one must have it)."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _fetch_member_offsets(self) -> None:
        """The group's committed offsets, over and over: they must never go back."""
        client, _ = self._client()
        while not self._stop_members.wait(0.5):
            try:
                found = client.admin.list_consumer_group_offsets(MEMBER_GROUP, timeout_ms=5_000)
            except TidelogError:
                continue
            self.history.info("mf", "member_offsets",
                              offsets=[[tp.partition, o.offset] for tp, o in found.items()])

    def stop_member_faults(self) -> None:
        """End the members' nemeses with the node faults, at the heal (a join under way ends
        first): no member is killed or paused after this."""
        self._stop_member_faults.set()
        for thread in self._threads:
            if thread.name.startswith(("chaos-mk", "chaos-mj")):
                thread.join(_MEMBER_START_S + _MEMBERS_SETTLE_S + MEMBER_JOIN_HOLD_S)

    def finish_members(self, data_offsets: dict[int, set[int]], timeout_s: float) -> None:
        """Once the log is final: wait until the live members have consumed it all (or the
        timeout), close them (commit, leave), and write every member's history."""
        if not self.members:
            return
        self.stop_member_faults()
        self._stop_members.set()
        deadline = time.monotonic() + timeout_s

        def caught_up() -> bool:
            seen: dict[int, set[int]] = collections.defaultdict(set)
            for member in self.members:
                for partition, offset, _ in member.consumed():
                    seen[partition].add(offset)
            return all(offsets <= seen[p] for p, offsets in data_offsets.items())

        while not caught_up() and time.monotonic() < deadline:
            time.sleep(0.2)
        for member in self.members:
            member.close()
        for member in self.members:
            for event in member.history():
                self.history.info(member.name, "member", **event)
            self.history.info(member.name, "member_end", at=member.ended_at)

    def _spawn(self, name: str, target: Any, *args: Any) -> None:
        def guarded() -> None:
            try:
                target(*args)
            except Exception as exc:  # a workload bug must fail the run, not vanish in a thread
                self.errors.append(f"{name}: {exc!r}")
                raise

        thread = threading.Thread(target=guarded, name=f"chaos-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    # ---- producers -------------------------------------------------------------------------

    def _produce(self, process: str) -> None:
        client, tracer = self._client()
        producer = client.producer(
            acks="all", idempotent=True, linger_ms=5,
            delivery_timeout_ms=self.config.delivery_timeout_ms,
        )
        self._producers.append(producer)
        pending: set[RecordFuture] = set()
        with self._pending_lock:
            self._pending[process] = pending
        interval = self.config.producers / self.config.rate
        next_at = time.monotonic()
        for n in itertools.count():
            if self._stop_writes.is_set():
                break
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
            while len(pending) >= self.config.max_pending and not self._stop_writes.is_set():
                time.sleep(0.01)  # polling our own bound; the producer has no "room" signal
                next_at = time.monotonic()
            tp = self.tps[n % len(self.tps)]
            value = f"{process}:{n}"
            op = self.history.invoke(process, "write", partition=tp.partition, value=value)
            try:
                future = producer.send(tp.topic, value.encode(), partition=tp.partition)
            except TidelogError as exc:
                self.history.complete(op, process, "write", UNKNOWN, partition=tp.partition,
                                      value=value, error=str(exc))
                continue
            with self._pending_lock:
                pending.add(future)
            future.add_done_callback(
                functools.partial(self._written, process, tracer, op, tp, value, pending)
            )

    def _written(self, process: str, tracer: Tracer, op: int, tp: TopicPartition,
                 value: str, pending: set[RecordFuture],
                 future: RecordFuture) -> None:
        with self._pending_lock:
            pending.discard(future)
        fields: dict[str, Any] = {"partition": tp.partition, "value": value}
        exc = future.exception()
        if exc is None:
            offset = future.result().offset
            ack = tracer.take_ack(tp, offset) if offset >= 0 else None
            self.history.complete(
                op, process, "write", OK, offset=offset,
                node=None if ack is None else ack.node,
                single_send=ack is not None and ack.single_send, **fields,
            )
            return
        # A timeout or a lost connection may hide a write that happened: unknown. A refusal the
        # producer does not retry (a bad batch, an unknown topic) is taken as a failure; the
        # checker never counts a "failed" value it finds in the log against the cluster, since
        # an earlier, retried attempt of the same batch may have written it.
        certain = isinstance(exc, TidelogError) and not isinstance(exc, RetriableError)
        self.history.complete(op, process, "write", FAIL if certain else UNKNOWN,
                              error=str(exc), **fields)

    def stop_writes(self, drain_timeout_s: float) -> None:
        """Stop sending, then wait for every write to be answered; what is still pending at
        the deadline stays without completion (unknown)."""
        self._stop_writes.set()
        deadline = time.monotonic() + drain_timeout_s
        for thread in self._threads:
            if thread.name.startswith(("chaos-p", "chaos-oc", "chaos-t")):
                thread.join(max(0.0, deadline - time.monotonic()))
        for producer in self._producers:
            with contextlib.suppress(TidelogError):  # unanswered writes remain unknown
                producer.flush(timeout_ms=max(0, int((deadline - time.monotonic()) * 1000)))
        for producer in self._producers:
            producer.close(timeout_ms=1000)

    # ---- consumers -------------------------------------------------------------------------

    def _consume(self, process: str, rng: random.Random) -> None:
        client, tracer = self._client()
        consumers = {
            level: client.consumer(isolation_level=level, fetch_max_wait_ms=100)
            for level in IsolationLevel
        }
        started_ms = wall_clock_ms()
        while not self._stop_reads.is_set():
            tp = rng.choice(self.tps)
            level = rng.choice(list(IsolationLevel))
            kind = rng.choice(LOOKUPS)
            target = rng.randint(started_ms, wall_clock_ms())
            spec = {
                "earliest": OffsetSpec.earliest(),
                "latest": OffsetSpec.latest(),
                "max": OffsetSpec.max_timestamp(),
                "timestamp": OffsetSpec.for_timestamp(target),
            }[kind]
            fields: dict[str, Any] = {
                "partition": tp.partition, "isolation": level.name.lower(), "lookup": kind,
                "target": spec.timestamp,
            }
            op = self.history.invoke(process, "list_offsets", **fields)
            try:
                answer = client.list_offsets(
                    {tp: spec}, isolation_level=level, timeout_ms=self.config.request_timeout_ms
                )[tp]
            except TidelogError as exc:
                self.history.complete(op, process, "list_offsets", FAIL, error=str(exc), **fields)
                continue
            self.history.complete(
                op, process, "list_offsets", OK, offset=answer.offset,
                timestamp=answer.timestamp, leader_epoch=answer.leader_epoch,
                node=tracer.last_node, **fields,
            )
            if answer.offset >= 0:
                start = max(0, answer.offset - 20) if kind == "latest" else answer.offset
                self._poll(process, consumers[level], tp, start, level)
            time.sleep(rng.uniform(0.0, 0.05))

    def _poll(self, process: str, consumer: Any, tp: TopicPartition, start: int,
              level: IsolationLevel) -> None:
        fields: dict[str, Any] = {
            "partition": tp.partition, "isolation": level.name.lower(), "from": start
        }
        op = self.history.invoke(process, "poll", **fields)
        consumer.assign([tp])
        consumer.seek(tp, start)
        try:
            records = consumer.poll(timeout_ms=300)
        except TidelogError as exc:
            self.history.complete(op, process, "poll", FAIL, error=str(exc), **fields)
            return
        read = [[r.offset, (r.value or b"").decode()] for r in records[:_POLL_RECORDS_KEPT]]
        self.history.complete(op, process, "poll", OK, records=read, **fields)

    def stop_reads(self) -> None:
        self._stop_reads.set()
        for thread in self._threads:
            if thread.name.startswith(("chaos-c", "chaos-of", "chaos-rc")):
                thread.join(30)

    # ---- transactions ----------------------------------------------------------------------

    def _transact(self, process: str, rng: random.Random) -> None:
        """Transactions of two records on each of two or more partitions (values
        ``t0:<n>:<k>``, k numbering them in send order), committed or aborted at random. A
        transaction that ends acknowledged is ``ok`` with its outcome (``committed`` True or
        False); one whose commit failed and whose abort was then acknowledged is an
        acknowledged abort (the coordinator refuses to abort a decided commit); anything else
        is unknown. A fenced
        (fatal) producer is replaced by a new one of the same transactional id."""
        client, _ = self._client()
        producer: Any = None
        interval = self.config.txn_producers / self.config.txn_rate
        next_at = time.monotonic()
        for n in itertools.count():
            if self._stop_writes.is_set():
                break
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic() - interval)  # no burst after an outage
            if producer is None:
                producer = self._txn_producer(client, process)
                if producer is None:
                    continue
            tps = rng.sample(self.tps, rng.randint(min(2, len(self.tps)), len(self.tps)))
            values = [(tp.partition, f"{process}:{n}:{k}")
                      for k, tp in enumerate(tp for tp in tps for _ in range(2))]
            commit = rng.random() >= self.config.txn_abort_share
            fields: dict[str, Any] = {"txn": f"{process}:{n}", "values": values,
                                      "commit": commit}
            op = self.history.invoke(process, "txn", **fields)
            try:
                producer.begin_transaction()
                for partition, value in values:
                    producer.send(self.config.topic, value.encode(), partition=partition)
                self.history.info(process, "txn_end", txn=fields["txn"])
                if commit:
                    producer.commit_transaction(timeout_ms=self.config.delivery_timeout_ms)
                else:
                    producer.abort_transaction(timeout_ms=self.config.delivery_timeout_ms)
            except TidelogError as exc:
                aborted = self._abort_after(producer)
                if not aborted:
                    producer = None  # fatal or stuck: a new incarnation fences this one
                self.history.complete(op, process, "txn", OK if aborted else UNKNOWN,
                                      committed=False, error=str(exc), **fields)
                continue
            self.history.complete(op, process, "txn", OK, committed=commit, **fields)
        if producer is not None:
            producer.close(timeout_ms=1000)

    def _txn_producer(self, client: Client, process: str) -> Any:
        producer = client.producer(transactional_id=f"chaos-{process}", acks="all",
                                   linger_ms=5, delivery_timeout_ms=self.config.delivery_timeout_ms,
                                   transaction_timeout_ms=self.config.delivery_timeout_ms)
        op = self.history.invoke(process, "init_transactions")
        try:
            producer.init_transactions(timeout_ms=self.config.delivery_timeout_ms)
        except TidelogError as exc:
            self.history.complete(op, process, "init_transactions", FAIL, error=str(exc))
            producer.close(timeout_ms=0)
            return None
        self.history.complete(op, process, "init_transactions", OK)
        return producer

    @staticmethod
    def _abort_after(producer: Any) -> bool:
        """After a failed transaction: whether its abort was acknowledged; when not, the
        producer cannot go on and is closed here."""
        try:
            producer.abort_transaction(timeout_ms=10_000)
        except TidelogError:
            producer.close(timeout_ms=0)
            return False
        return True

    def _read_committed(self, process: str) -> None:
        """A read_committed consumer of every partition from the start, each poll recorded:
        what it returns is what a user of committed transactions sees, in order."""
        client, _ = self._client()
        consumer = client.consumer(isolation_level="read_committed", fetch_max_wait_ms=100)
        consumer.assign(self.tps)
        for tp in self.tps:
            consumer.seek(tp, 0)
        while not self._stop_reads.is_set():
            self._txn_poll(process, consumer)

    def _txn_poll(self, process: str, consumer: Any) -> int:
        op = self.history.invoke(process, "txn_poll")
        try:
            records = consumer.poll(timeout_ms=300)
        except TidelogError as exc:
            self.history.complete(op, process, "txn_poll", FAIL, error=str(exc))
            return 0
        read = [[r.partition, r.offset, (r.value or b"").decode()] for r in records
                if r.value is not None and r.value.startswith(b"t")]
        self.history.complete(op, process, "txn_poll", OK, records=read)
        return len(records)

    def final_txn_read(self, timeout_s: float) -> None:
        """After the drain: one read_committed consumer reads every partition from the start
        up to its end, so a committed transaction lost or torn shows in the history. The end is
        a partition's last stable offset once it has reached its high watermark: a commit is
        acknowledged when the coordinator has logged it, and its markers are written after
        (as in Kafka), so a read that stopped at a last stable offset still short of a marker
        saw part of a transaction (CI did, 40 ms after a commit, with a coordinator moving)."""
        if self.config.txn_rate <= 0:
            return
        client, _ = self._client()
        consumer = client.consumer(isolation_level="read_committed", fetch_max_wait_ms=100)
        consumer.assign(self.tps)
        for tp in self.tps:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                ends = client.list_offsets({tp: OffsetSpec.latest() for tp in self.tps},
                                           isolation_level=IsolationLevel.READ_COMMITTED,
                                           timeout_ms=5_000)
                highs = client.list_offsets({tp: OffsetSpec.latest() for tp in self.tps},
                                            isolation_level=IsolationLevel.READ_UNCOMMITTED,
                                            timeout_ms=5_000)
            except TidelogError:
                time.sleep(0.2)
                continue
            settled = all(ends[tp].offset >= highs[tp].offset for tp in self.tps)
            if settled and all(consumer.position(tp) >= ends[tp].offset for tp in self.tps):
                self.history.info("final", "txn_read_done")
                return
            self._txn_poll("final", consumer)
        self.errors.append(f"the final read_committed read did not reach the end within "
                           f"{timeout_s:g}s (or a transaction was still undecided)")

    # ---- consumer offsets ----------------------------------------------------------------------

    def _commit(self, process: str, rng: random.Random) -> None:
        """Commits at the configured pace, each one value on every partition, to a random
        group. Each is one attempt (a consumer's asynchronous commit, which Kafka never
        retries): a retried commit may take effect twice, once before and once after a newer
        commit, which is allowed and would read as a stale fetch. A commit that does not end
        acknowledged is unknown, whatever the error: a coordinator that lost its leadership
        after appending answers NOT_COORDINATOR, and the next leader may still commit what it
        appended."""
        client, tracer = self._client()
        consumers = {group: client.consumer(group_id=group, enable_auto_commit=False)
                     for group in self.groups}
        interval = self.config.committers / self.config.commit_rate
        next_at = time.monotonic()
        while not self._stop_writes.is_set():
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic() - interval)  # no burst after an outage
            group = rng.choice(self.groups)
            value = next(self._commit_values)
            fields: dict[str, Any] = {
                "group": group, "value": value, "partitions": [tp.partition for tp in self.tps],
                "offsets_partition": group_partition(group, self.config.offsets_partitions),
            }
            op = self.history.invoke(process, "offset_commit", **fields)
            future = consumers[group].commit_async(
                {tp: OffsetAndMetadata(value, process) for tp in self.tps}
            )
            try:
                future.result(timeout=2 * self.config.request_timeout_ms / 1000)
            except (TidelogError, concurrent.futures.TimeoutError) as exc:
                self.history.complete(op, process, "offset_commit", UNKNOWN,
                                      error=str(exc) or type(exc).__name__, **fields)
                continue
            self.history.complete(op, process, "offset_commit", OK, node=tracer.last_node,
                                  **fields)

    def _fetch_offsets(self, process: str, rng: random.Random) -> None:
        """OffsetFetch of a random group's whole set from a random node, one attempt each."""
        client, _ = self._client()
        client.connections.metadata.ensure(client.connections.deadline(60_000))
        nodes = sorted(client.metadata.nodes())
        while not self._stop_reads.is_set():
            self.fetch_offsets(process, client, rng.choice(self.groups), rng.choice(nodes))
            time.sleep(rng.uniform(0.0, 0.05))

    def fetch_offsets(self, process: str, client: Client, group: str, node: int
                      ) -> list[list[int]] | None:
        """One OffsetFetch of `group`'s set from `node`, recorded; the [partition, offset]
        pairs it answered (-1: none committed), None when it failed."""
        fields: dict[str, Any] = {"group": group, "node": node,
                                  "partitions": [tp.partition for tp in self.tps]}
        op = self.history.invoke(process, "offset_fetch", **fields)
        try:
            response = client.connections.call(node, "OffsetFetch",
                                   wire.offset_fetch_request(group, self.tps),
                                   self.config.request_timeout_ms / 1000)
            answers = wire.parse_offset_fetch(response, group)
            failed = [f"{tp}: {a.error}" for tp, a in answers.items()
                      if isinstance(a, wire.Failure)]
            if failed or set(answers) != set(self.tps):
                raise TidelogError("; ".join(failed) or f"answered {sorted(answers)}")
        except TidelogError as exc:
            self.history.complete(op, process, "offset_fetch", FAIL, error=str(exc), **fields)
            return None
        offsets = [[tp.partition, a.offset if isinstance(a, OffsetAndMetadata) else -1]
                   for tp, a in sorted(answers.items())]
        self.history.complete(op, process, "offset_fetch", OK, offsets=offsets, **fields)
        return offsets

    def final_fetches(self, timeout_s: float) -> None:
        """After every commit ended: each group's set from every node, retried until each
        answers, so that a lost acknowledged commit shows in the history even if the fetchers
        happened not to ask after the last commit."""
        if self.config.commit_rate <= 0:
            return
        client, _ = self._client()
        deadline = time.monotonic() + timeout_s
        client.connections.metadata.ensure(client.connections.deadline(timeout_s * 1000))
        for node in sorted(client.metadata.nodes()):
            for group in self.groups:
                while self.fetch_offsets("final", client, group, node) is None:
                    if time.monotonic() > deadline:
                        self.errors.append(f"no final fetch of {group} from node {node} "
                                           f"answered within {timeout_s:g}s of the heal")
                        break
                    time.sleep(0.2)  # a coordinator still loading after the heal

    def close(self) -> None:
        self._stop_writes.set()
        self._stop_reads.set()
        self._stop_members.set()
        self._stop_member_faults.set()
        for member in self.members:
            member.kill()
        for client in self._clients:
            client.close()


def offset_groups(count: int, offsets_partitions: int) -> list[str]:
    """`count` group names whose coordinators are spread over the partitions of
    __consumer_offsets (round robin), so that every coordinator has groups to lose."""
    groups: list[str] = []
    names = (f"chaos-g{n}" for n in itertools.count())
    while len(groups) < count:
        name = next(names)
        if group_partition(name, offsets_partitions) == len(groups) % offsets_partitions:
            groups.append(name)
    return groups
