"""The checker: what the history and the healed cluster's logs must agree on.

It runs after the nemesis healed everything and the workload drained. The final state is read
from every replica with debug fetches (replica_id -2: the whole local log, control batches
included), straight from the nodes, not through the proxies. The reference log of a partition
is its leader's, up to the leader's high watermark: by then every acknowledged write must be
there, once, at the offset it was acknowledged with.

A write that ended ``unknown`` may or may not be in the log; one that ended ``ok`` must be. A
ListOffsets answer is checked against the final log: everything below a latest answer was
committed at that moment, so it must still be there (answer <= final HW), and a by-time answer
must be the first record at or after its target in the final log (below the answer, the log was
committed, hence unchanged since).

Consumer-group members (``check_members``) are checked from their histories (who owned which
partition when, what they consumed, the group's committed offsets over time) and the final log.

Consumer offsets are checked from the history alone: each (group, partition) is a register
whose writes (commits) carry values unique in the run, read by OffsetFetch. Every commit is
one attempt, so it takes effect at most once (a retried commit may land twice, around a newer
one); one that did not end acknowledged may have taken effect at any time after it began.
"""

from __future__ import annotations

import bisect
import itertools
import json
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from tidelog import wire
from tidelog.chaos.history import OK, UNKNOWN, Op, operations
from tidelog.errors import CorruptMessageError
from tidelog.member_history import double_ownership
from tidelog.records import check_crc, decode_records, iter_batches
from tidelog.testing import LocalCluster
from tidelog.types import DEBUGGING_REPLICA_ID, IsolationLevel, TopicPartition
from tidelog.v1 import tidelog_pb2_grpc

__all__ = ["FinalState", "Invariant", "ReplicaSnapshot", "check", "check_members",
           "read_final_state"]

_EXAMPLES = 5
_FETCH_BYTES = 4 << 20


@dataclass(frozen=True)
class Batch:
    base_offset: int
    last_offset: int
    epoch: int
    control: bool
    #: (producer id, producer epoch, base sequence): what idempotence deduplicates by.
    producer: tuple[int, int, int]
    raw: bytes
    #: (offset, value, timestamp) of each data record.
    records: tuple[tuple[int, str, int], ...]

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base_offset, "last": self.last_offset, "epoch": self.epoch,
                "control": self.control, "producer": list(self.producer),
                "values": [r[1] for r in self.records]}


@dataclass(frozen=True)
class ReplicaSnapshot:
    """One replica's whole local log as a debug fetch returns it."""

    node: int
    high_watermark: int
    log_start_offset: int
    batches: tuple[Batch, ...]
    error: str = ""

    @property
    def log_end_offset(self) -> int:
        return self.batches[-1].last_offset + 1 if self.batches else self.log_start_offset


@dataclass
class FinalState:
    #: partition -> node -> its replica's log.
    replicas: dict[int, dict[int, ReplicaSnapshot]]
    #: partition -> the node that led it when the state was read.
    leaders: dict[int, int | None]
    #: Seconds the replicas took to agree after the drain (None: they never did).
    converged_after: float | None

    def dump(self, path: Path) -> None:
        """Every replica's batches as JSON lines, to study a failure after the cluster is gone
        (the history says what clients saw; this says where it landed and under which producer
        epoch and sequence)."""
        with path.open("w", encoding="utf-8") as file:
            for partition, replicas in sorted(self.replicas.items()):
                for node, log in sorted(replicas.items()):
                    file.write(json.dumps({
                        "partition": partition, "node": node, "hw": log.high_watermark,
                        "log_start": log.log_start_offset, "error": log.error,
                        "leader": self.leaders.get(partition) == node,
                    }) + "\n")
                    for batch in log.batches:
                        file.write(json.dumps({"partition": partition, "node": node,
                                               **batch.to_json()}) + "\n")

    def data_offsets(self) -> dict[int, set[int]]:
        """partition -> the offsets of the data records of its reference log (committed)."""
        out: dict[int, set[int]] = {}
        for partition in self.replicas:
            reference = self.reference(partition)
            if reference is not None:
                out[partition] = {offset for batch in _committed(reference)
                                  for offset, _, _ in batch.records}
        return out

    def reference(self, partition: int) -> ReplicaSnapshot | None:
        """The leader's log, else the replica with the highest HW."""
        replicas = self.replicas[partition]
        leader = self.leaders.get(partition)
        if leader in replicas and not replicas[leader].error:
            return replicas[leader]
        readable = [r for r in replicas.values() if not r.error]
        return max(readable, key=lambda r: r.high_watermark, default=None)


def _read_replica(channel: grpc.Channel, node: int, tp: TopicPartition) -> ReplicaSnapshot:
    stub = tidelog_pb2_grpc.TidelogStub(channel)
    batches: list[Batch] = []
    offset = 0
    hw = start = -1
    while True:
        request = wire.fetch_request(
            {tp: wire.FetchPosition(offset, -1)}, isolation=IsolationLevel.READ_UNCOMMITTED,
            max_wait_ms=0, min_bytes=0, max_bytes=_FETCH_BYTES, partition_max_bytes=_FETCH_BYTES,
        )
        request.replica_id = DEBUGGING_REPLICA_ID
        answer = wire.parse_fetch(stub.Fetch(request, timeout=10))[tp]
        if isinstance(answer, wire.Failure):
            return ReplicaSnapshot(node, hw, start, tuple(batches), str(answer.error))
        hw, start = answer.high_watermark, answer.log_start_offset
        if offset == 0 and start > 0:
            offset = start
            continue
        data = answer.records
        if not data:
            return ReplicaSnapshot(node, hw, start, tuple(batches))
        try:
            for pos, header in iter_batches(data):
                check_crc(data, pos, header)
                records = () if header.is_control else tuple(
                    (r.offset, (r.value or b"").decode(errors="replace"), r.timestamp)
                    for r in decode_records(data, pos, header)
                )
                batches.append(Batch(header.base_offset, header.last_offset,
                                     header.partition_leader_epoch, header.is_control,
                                     (header.producer_id, header.producer_epoch,
                                      header.base_sequence),
                                     bytes(data[pos:pos + header.size]), records))
                offset = header.next_offset
        except CorruptMessageError as exc:  # damaged on disk and never repaired
            return ReplicaSnapshot(node, hw, start, tuple(batches),
                                   f"damaged batch after offset {offset - 1}: {exc}")


def read_final_state(cluster: LocalCluster, topic: str, assignment: dict[int, tuple[int, ...]],
                     timeout_s: float = 60.0) -> FinalState:
    """Waits until every partition has a leader and all its replicas hold the same log with the
    HW at its end (the drain wrote nothing more), then returns what each replica holds; at the
    deadline, returns what there is and the checker reports the difference."""
    started = time.monotonic()
    channels = {n: grpc.insecure_channel(cluster.address_of(n)) for n in cluster.node_ids}
    try:
        while True:
            leaders = {p: cluster.leader_of((topic, p)) for p in assignment}
            replicas: dict[int, dict[int, ReplicaSnapshot]] = {}
            for p, nodes in assignment.items():
                replicas[p] = {}
                for node in nodes:
                    channel = channels[node]
                    try:
                        replicas[p][node] = _read_replica(channel, node, TopicPartition(topic, p))
                    except grpc.RpcError as exc:
                        replicas[p][node] = ReplicaSnapshot(node, -1, -1, (), f"{exc.code().name}")
            converged = all(
                leaders[p] is not None and len({
                    (r.high_watermark, r.log_end_offset, r.error) for r in replicas[p].values()
                }) == 1 and all(r.high_watermark == r.log_end_offset for r in replicas[p].values())
                for p in assignment
            )
            elapsed = time.monotonic() - started
            if converged or elapsed > timeout_s:
                return FinalState(replicas, leaders, elapsed if converged else None)
            time.sleep(0.5)
    finally:
        for channel in channels.values():
            channel.close()


@dataclass
class Invariant:
    name: str
    description: str
    violations: list[str] = field(default_factory=list)
    count: int = 0

    @property
    def ok(self) -> bool:
        return self.count == 0

    def fail(self, message: str) -> None:
        self.count += 1
        if len(self.violations) < _EXAMPLES:
            self.violations.append(message)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "description": self.description,
                "violations": self.count, "examples": self.violations}


def _committed(log: ReplicaSnapshot) -> list[Batch]:
    return [b for b in log.batches if b.last_offset < log.high_watermark]


def check(entries: list[dict[str, Any]], final: FinalState) -> list[Invariant]:
    """Every invariant of issue 6, and those of consumer offsets (issue 14)."""
    lost = Invariant("no_lost_acknowledged_writes",
                     "every acknowledged write is in the final log at its acknowledged offset")
    duplicates = Invariant("no_duplicates", "no value appears twice in the final log")
    one_offset = Invariant(
        "no_value_at_two_offsets",
        "acks, consumer reads and the final log put each value at one offset and each offset "
        "holds one value; the log holds only values that were written")
    dense = Invariant("offsets_dense_and_monotonic",
                      "each replica's batches (control batches included) cover its log "
                      "without gaps or overlaps, in increasing order")
    identical = Invariant("replicas_identical_up_to_hw",
                          "every replica holds the same batches, byte for byte, below the HW")
    bounded = Invariant(
        "list_offsets_bounded_and_consistent",
        "latest answers <= final HW; by-time, max and earliest answers agree with a scan of "
        "the final log")
    monotonic = Invariant("latest_never_decreases_per_client",
                          "the latest offsets one client sees for a partition never go down")
    one_leader = Invariant("one_leader_per_epoch",
                           "writes acknowledged in one leader epoch were acknowledged by one "
                           "node")
    invariants = [lost, duplicates, one_offset, dense, identical, bounded, monotonic, one_leader,
                  *check_offsets(entries), *check_txns(entries)]

    logs: dict[int, dict[int, tuple[str, int]]] = {}  # partition -> offset -> (value, ts)
    epochs: dict[int, dict[int, int]] = {}  # partition -> offset -> batch epoch
    hws: dict[int, int] = {}
    for partition, replicas in sorted(final.replicas.items()):
        reference = final.reference(partition)
        if reference is None:
            identical.fail(f"partition {partition}: no replica could be read")
            continue
        hws[partition] = reference.high_watermark
        logs[partition], epochs[partition] = {}, {}
        for batch in _committed(reference):
            for offset in range(batch.base_offset, batch.last_offset + 1):
                epochs[partition][offset] = batch.epoch
            for offset, value, timestamp in batch.records:
                logs[partition][offset] = (value, timestamp)
        _check_dense(partition, replicas.values(), dense)
        _check_identical(partition, reference, replicas.values(), identical)

    written = {op.invoke["value"] for op in operations(entries, "write")} | {
        value for op in operations(entries, "txn") for _, value in op.invoke["values"]}
    where: dict[str, tuple[int, int]] = {}
    for partition, log in logs.items():
        for offset, (value, _) in log.items():
            if value in where:
                duplicates.fail(f"{value!r} at p{partition}@{offset} and "
                                f"p{where[value][0]}@{where[value][1]}")
            else:
                where[value] = (partition, offset)
            if value not in written:
                one_offset.fail(f"p{partition}@{offset} holds {value!r}, which nobody wrote")

    ackers: dict[tuple[int, int], set[int]] = defaultdict(set)
    for op in operations(entries, "write"):
        if op.outcome != OK:
            continue
        value, partition, offset = op.get("value"), op.get("partition"), op.get("offset")
        if partition not in logs:
            continue
        found = where.get(value)
        if found is None:
            lost.fail(f"{value!r} acknowledged at p{partition}@{offset} by node "
                      f"{op.get('node')} is not in the final log (HW {hws[partition]})")
            continue
        if offset >= 0 and found != (partition, offset):
            one_offset.fail(f"{value!r} acknowledged at p{partition}@{offset}, final log has it "
                            f"at p{found[0]}@{found[1]}")
        if offset >= 0 and op.get("single_send") and op.get("node") is not None:
            ackers[(partition, epochs[partition][offset])].add(op.get("node"))
    for (partition, epoch), nodes in sorted(ackers.items()):
        if len(nodes) > 1:
            one_leader.fail(f"p{partition} epoch {epoch}: writes acknowledged by nodes "
                            f"{sorted(nodes)}")

    for op in operations(entries, "poll"):
        if op.outcome != OK or op.get("partition") not in logs:
            continue
        log = logs[op.get("partition")]
        for offset, value in op.get("records"):
            held = log.get(offset)
            if held is None or held[0] != value:
                one_offset.fail(f"{op.invoke['process']} read {value!r} at "
                                f"p{op.get('partition')}@{offset}; the final log has "
                                f"{held[0] if held else 'nothing'!r} there")

    starts = {p: r.log_start_offset for p in hws if (r := final.reference(p)) is not None}
    _check_lookups(list(operations(entries, "list_offsets")), logs, hws, starts, bounded,
                   monotonic)
    invariants += check_members(entries, final.data_offsets())
    return invariants


def _check_dense(partition: int, replicas: Iterable[ReplicaSnapshot], dense: Invariant) -> None:
    for replica in replicas:
        expected = replica.log_start_offset
        for batch in replica.batches:
            if batch.base_offset != expected or batch.last_offset < batch.base_offset:
                dense.fail(f"p{partition} node {replica.node}: batch [{batch.base_offset}, "
                           f"{batch.last_offset}] after offset {expected - 1}")
            offsets = [r[0] for r in batch.records]
            if offsets and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
                dense.fail(f"p{partition} node {replica.node}: records of batch "
                           f"{batch.base_offset} at offsets {offsets[:10]}...")
            expected = batch.last_offset + 1


def _check_identical(partition: int, reference: ReplicaSnapshot,
                     replicas: Iterable[ReplicaSnapshot], identical: Invariant) -> None:
    wanted = _committed(reference)
    for replica in replicas:
        if replica.error:
            identical.fail(f"p{partition} node {replica.node} unreadable: {replica.error}")
            continue
        mine = [b for b in replica.batches if b.last_offset < reference.high_watermark]
        if len(mine) != len(wanted):
            identical.fail(f"p{partition} node {replica.node} holds {len(mine)} batches below "
                           f"HW {reference.high_watermark}, the leader {len(wanted)}")
            continue
        for theirs, ours in zip(wanted, mine, strict=True):
            if theirs.raw != ours.raw:
                identical.fail(f"p{partition} node {replica.node}: batch at {ours.base_offset} "
                               f"(epoch {ours.epoch}) differs from node {reference.node}'s "
                               f"(epoch {theirs.epoch})")
                break


class _Scan:
    """A partition's committed records in offset order, with running maximum timestamps, so
    "first record at or after T" is a bisection rather than a scan per lookup."""

    def __init__(self, log: dict[int, tuple[str, int]]) -> None:
        self.offsets = sorted(log)
        self.timestamps = [log[o][1] for o in self.offsets]
        self.running_max = list(itertools.accumulate(self.timestamps, max))

    def first_at_or_after(self, target: int) -> int | None:
        i = bisect.bisect_left(self.running_max, target)
        return self.offsets[i] if i < len(self.offsets) else None

    def latest_below(self, offset: int) -> int | None:
        """The largest timestamp of the records below ``offset``."""
        i = bisect.bisect_left(self.offsets, offset)
        return self.running_max[i - 1] if i > 0 else None


def _check_lookups(lookups: list[Op], logs: dict[int, dict[int, tuple[str, int]]],
                   hws: dict[int, int], starts: dict[int, int], bounded: Invariant,
                   monotonic: Invariant) -> None:
    scans = {p: _Scan(log) for p, log in logs.items()}
    latest_seen: dict[tuple[str, int, str], int] = {}
    for op in sorted(lookups, key=lambda o: o.end or o.start):
        if op.outcome != OK or op.get("partition") not in logs:
            continue
        partition, kind, offset = op.get("partition"), op.get("lookup"), op.get("offset")
        log, hw, scan = logs[partition], hws[partition], scans[partition]
        key = (op.invoke["process"], partition, op.get("isolation"))
        who = f"{key[0]} p{partition} {kind} ({key[2]}, node {op.get('node')})"
        if kind == "latest":
            if offset > hw:
                bounded.fail(f"{who} answered {offset} > final HW {hw}")
            if offset < latest_seen.get(key, 0):
                monotonic.fail(f"{who}: {offset} after {latest_seen[key]}")
            latest_seen[key] = max(offset, latest_seen.get(key, 0))
        elif kind == "earliest":
            if offset != starts[partition]:
                bounded.fail(f"{who} answered {offset}, the log starts at {starts[partition]}")
        elif offset >= 0:
            held = log.get(offset)
            if offset >= hw or held is None or held[1] != op.get("timestamp"):
                bounded.fail(f"{who} answered {offset} (timestamp {op.get('timestamp')}); the "
                             f"final log has {held} there, HW {hw}")
            elif kind == "timestamp":
                first = scan.first_at_or_after(op.get("target"))
                if first != offset:
                    bounded.fail(f"{who} target {op.get('target')} answered {offset}; the first "
                                 f"record at or after it in the final log is at {first}")
            elif kind == "max":
                below = scan.latest_below(offset)
                if below is not None and below > held[1]:
                    bounded.fail(f"{who} answered {offset} (timestamp {held[1]}), yet a record "
                                 f"below it has the later timestamp {below}")
        elif kind == "timestamp":
            # Nothing found: every record at or after the target was at or above the bound,
            # which was at least the latest offset this client had already seen.
            first = scan.first_at_or_after(op.get("target"))
            if first is not None and first < latest_seen.get(key, 0):
                bounded.fail(f"{who} target {op.get('target')} found nothing, yet offset "
                             f"{first} matches and this client had seen latest {latest_seen[key]}")


def check_offsets(entries: list[dict[str, Any]]) -> list[Invariant]:
    """Committed offsets against the history: fetches linearizable per (group, partition), and
    commits atomic (every fetch of a whole set sees one commit's value everywhere)."""
    linear = Invariant(
        "offset_fetches_linearizable",
        "per (group, partition), a fetch returns a value some commit wrote (or -1 before any), "
        "begun before the fetch ended, and never a value older than one a commit acknowledged, "
        "or a fetch returned, before the fetch began")
    atomic = Invariant("offset_commits_atomic",
                       "every fetch of a group's whole set sees one commit on all partitions")
    commits: dict[str, list[Op]] = defaultdict(list)
    for op in operations(entries, "offset_commit"):
        commits[op.get("group")].append(op)
    fetches: dict[str, list[Op]] = defaultdict(list)
    for op in operations(entries, "offset_fetch"):
        if op.outcome == OK:
            fetches[op.get("group")].append(op)
    origin = min((float(e["mono"]) for e in entries), default=0.0)
    for group in sorted(commits.keys() | fetches.keys()):
        writes: dict[int, dict[int, Op]] = defaultdict(dict)
        for op in commits[group]:
            for partition in op.get("partitions"):
                writes[partition][op.get("value")] = op
        reads: dict[int, list[tuple[Op, int]]] = defaultdict(list)
        for op in fetches[group]:
            offsets = op.get("offsets")
            if len({value for _, value in offsets}) > 1:
                atomic.fail(f"{_who(op, origin)}: {group} read a mix of commits: "
                            + ", ".join(f"p{p}={v}" for p, v in offsets))
            for partition, value in offsets:
                reads[partition].append((op, value))
        for partition in sorted(writes.keys() | reads.keys()):
            _check_register(f"{group} p{partition}", writes[partition], reads[partition],
                            linear, origin)
    return [linear, atomic]


@dataclass
class _Txn:
    """One transaction of the history: its values by partition in send order, and when its
    producer asked to end it (no record of it may be read before that)."""

    op: Op
    values: dict[int, list[str]]
    ended_at: float = float("inf")

    @property
    def committed(self) -> bool:
        """Acknowledged committed: every record must be readable."""
        return self.op.outcome == OK and bool(self.op.get("committed"))

    @property
    def aborted(self) -> bool:
        """Acknowledged aborted: no record may ever be read under read_committed."""
        return self.op.outcome == OK and not self.op.get("committed")


def check_txns(entries: list[dict[str, Any]]) -> list[Invariant]:
    """Transactions against what read_committed consumers read (issue 16). Every read names
    its transaction by its value (``t0:<n>:<k>``: the n-th transaction of t0, k-th record in
    send order). The final read is one read_committed pass over every partition after the
    drain. Nothing to check (and nothing failed) in a run without transactions."""
    aborted_read = Invariant("no_aborted_reads",
                             "read_committed never returns a record of an aborted transaction "
                             "(G1a)")
    intermediate = Invariant("no_intermediate_reads",
                             "read_committed never returns a record of a transaction before "
                             "its producer asked to commit it (G1b)")
    lost = Invariant("no_lost_committed_transactions",
                     "every record of an acknowledged commit is in the final read_committed "
                     "read")
    torn = Invariant("no_torn_transactions",
                     "a transaction seen at all is seen whole in the final read, and every "
                     "reader sees each partition's part of it in send order")
    txns: dict[str, _Txn] = {}
    for op in operations(entries, "txn"):
        values: dict[int, list[str]] = defaultdict(list)
        for partition, value in op.invoke["values"]:
            values[partition].append(value)
        txns[op.invoke["txn"]] = _Txn(op, dict(values))
    if not txns:
        return []
    for entry in entries:
        if entry.get("f") == "txn_end" and entry["txn"] in txns:
            txns[entry["txn"]].ended_at = float(entry["mono"])
    origin = min((float(e["mono"]) for e in entries), default=0.0)
    # reader -> partition -> (offset, value) in read order; the final read apart.
    streams: dict[str, dict[int, list[tuple[int, str]]]] = defaultdict(lambda: defaultdict(list))
    final_read = False
    for op in operations(entries, "txn_poll"):
        if op.outcome != OK:
            continue
        final_read |= op.invoke["process"] == "final"
        for partition, offset, value in op.get("records"):
            streams[op.invoke["process"]][partition].append((offset, value))
            txn = txns.get(value.rsplit(":", 1)[0])
            if txn is None:
                continue
            if txn.aborted:
                aborted_read.fail(f"{_who(op, origin)} read {value!r} at p{partition}@{offset}; "
                                  f"its transaction was aborted")
            if op.end is not None and op.end < txn.ended_at:
                ended = ("never" if txn.ended_at == float("inf")
                         else f"at {txn.ended_at - origin:.3f}s")
                intermediate.fail(f"{_who(op, origin)} read {value!r} at p{partition}@{offset}; "
                                  f"its producer asked to end the transaction {ended}")
    for reader, partitions in sorted(streams.items()):
        for partition, stream in sorted(partitions.items()):
            _check_order(reader, partition, stream, txns, torn)
    if not final_read:
        lost.fail("no final read_committed read")
        return [aborted_read, intermediate, lost, torn]
    final = {value for stream in streams["final"].values() for _, value in stream}
    for name, txn in sorted(txns.items()):
        wanted = {value for values in txn.values.values() for value in values}
        seen = wanted & final
        if txn.committed and not seen:
            lost.fail(f"{name} (commit acknowledged at {_who(txn.op, origin)}): none of its "
                      f"{len(wanted)} records is readable")
        elif seen and seen != wanted:
            torn.fail(f"{name} ({txn.op.outcome}, committed={txn.op.get('committed')}): "
                      f"{sorted(seen)} readable, {sorted(wanted - seen)} not")
    return [aborted_read, intermediate, lost, torn]


def _check_order(reader: str, partition: int, stream: list[tuple[int, str]],
                 txns: dict[str, _Txn], torn: Invariant) -> None:
    """A transaction's records of one partition come in send order, with none of its
    producer's other records between: a reader that reads one of them and then a later offset
    of the same producer reads the next one of the transaction."""
    by_producer: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for offset, value in stream:
        by_producer[value.split(":", 1)[0]].append((offset, value))
    reported: set[str] = set()
    for records in by_producer.values():
        for (offset, value), (next_offset, next_value) in itertools.pairwise(records):
            name = value.rpartition(":")[0]
            txn = txns.get(name)
            if txn is None or name in reported or next_offset <= offset:
                continue  # not a transaction of the history, or a re-read
            expected = txn.values.get(partition, [])
            position = expected.index(value) if value in expected else -1
            following = expected[position + 1] if 0 <= position < len(expected) - 1 else None
            if following is not None and next_value != following:
                reported.add(name)
                torn.fail(f"{reader} read {value!r} at p{partition}@{offset}, then "
                          f"{next_value!r} at @{next_offset}, not {following!r}")


def _who(op: Op, origin: float) -> str:
    end = f"{op.end - origin:.3f}" if op.end is not None else "?"
    return (f"{op.invoke['process']} (node {op.get('node')}, "
            f"[{op.start - origin:.3f}s, {end}s])")


def _check_register(name: str, writes: dict[int, Op], reads: list[tuple[Op, int]],
                    linear: Invariant, origin: float) -> None:
    """One register with unique written values. A value is *known* from the earliest moment
    it was certainly in effect: its commit's acknowledgement, or the end of a fetch that
    returned it. A fetch that returns v is stale when some other write w began after v was
    known (so v took effect before w) and w was known before the fetch began (so w took
    effect before it): the fetch cannot be placed between them. -1 (nothing committed) is
    known from the start."""
    known: dict[int, float] = {-1: float("-inf")}
    for value, op in writes.items():
        if op.outcome == OK and op.end is not None:
            known[value] = op.end
    for op, value in reads:
        if value in writes and op.end is not None:
            known[value] = min(known.get(value, float("inf")), op.end)
    for value, op in writes.items():
        if value in known:  # no earlier than its commit began (a read before that fails below)
            known[value] = max(known[value], op.start)
    # Writes by start time, with the earliest "known" among those starting at or after each.
    order = sorted((op.start, value) for value, op in writes.items())
    starts = [start for start, _ in order]
    earliest: list[tuple[float, int]] = []
    best = (float("inf"), -1)
    for _, value in reversed(order):
        best = min(best, (known.get(value, float("inf")), value))
        earliest.append(best)
    earliest.reverse()
    for op, value in reads:
        assert op.end is not None
        who = _who(op, origin)
        if value != -1 and value not in writes:
            linear.fail(f"{name}: {who} read {value}, which no commit wrote")
            continue
        if value != -1 and writes[value].start > op.end:
            linear.fail(f"{name}: {who} read {value}, committed only from "
                        f"{writes[value].start - origin:.3f}s")
            continue
        i = bisect.bisect_right(starts, known[value])
        if i < len(earliest) and earliest[i][0] < op.start:
            newer_known, newer = earliest[i]
            linear.fail(f"{name}: {who} read {value} (in effect from "
                        f"{max(known[value] - origin, 0):.3f}s), but {newer}, begun after that, "
                        f"was in effect from {newer_known - origin:.3f}s")


def check_members(entries: list[dict[str, Any]],
                  data_offsets: dict[int, set[int]]) -> list[Invariant]:
    """Consumer-group members (issue 15) against their histories: no partition owned by two
    members at once, the group's committed offsets never going back, and every record of the
    final log consumed by some member. `data_offsets`: partition -> offsets of the data
    records in the final log. Nothing to check (and nothing failed) in a run without
    members."""
    single = Invariant("no_double_ownership",
                       "no partition is owned by two group members at once (a fenced member "
                       "that has not learnt it yet excepted, as in Kafka)")
    forward = Invariant("member_commits_never_go_back",
                        "the group's committed offset of each partition never decreases")
    consumed = Invariant("every_record_consumed",
                         "every record of the final log was returned to some group member")
    histories: dict[str, tuple[list[dict[str, Any]], float | None]] = {}
    seen: dict[int, set[int]] = defaultdict(set)
    for entry in entries:
        if entry.get("f") == "member":
            events, _ = histories.setdefault(entry["process"], ([], None))
            events.append(entry)
            if entry["ev"] == "recs":
                for partition, offset in entry["r"]:
                    seen[partition].add(offset)
        elif entry.get("f") == "member_end":
            events, _ = histories.setdefault(entry["process"], ([], None))
            histories[entry["process"]] = (events, entry["at"])
    if not histories:
        return []
    for overlap in double_ownership(histories):
        if not overlap.startswith("zombie"):
            single.fail(overlap)
    last: dict[int, int] = {}
    for entry in entries:
        if entry.get("f") != "member_offsets":
            continue
        for partition, offset in entry["offsets"]:
            if offset < last.get(partition, -1):
                forward.fail(f"p{partition}: committed {last[partition]}, later {offset}")
            last[partition] = max(offset, last.get(partition, -1))
    for partition, offsets in sorted(data_offsets.items()):
        missing = sorted(offsets - seen[partition])
        if missing:
            consumed.fail(f"p{partition}: {len(missing)} records never consumed, e.g. at "
                          f"{missing[:5]}")
    return [single, forward, consumed]


def summarize_writes(entries: list[dict[str, Any]]) -> dict[str, int]:
    counts = {"ok": 0, "unknown": 0, "fail": 0}
    for op in operations(entries, "write"):
        counts[op.outcome if op.outcome in counts else UNKNOWN] += 1
    return counts
