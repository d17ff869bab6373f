"""Targeted chaos scenarios: one fault placed at the moment a bug needs, so that the checker
fails every run with the bug and passes every run without it (a seeded random run of
``chaos.run`` hits such a moment only now and then).

``lost_prepare``: a transaction coordinator cut off from its partition's followers while it
ends a transaction, so that its PrepareCommit cannot commit and the next coordinator, which
never saw it, aborts the transaction. A coordinator that writes its markers only once the
Prepare record has committed (kafka-mapping §8.6) has written none, and the abort is all
there is; one that writes them before (the planted bug ``test.txn.markers.before.prepare``)
has already made the transaction readable, and the checker finds records of an acknowledged
abort (G1a) and a transaction partly committed, partly aborted (torn).

The markers must reach partitions whose quorum the cut leaves whole while the Prepare cannot
reach its quorum, so the cluster has four nodes: `__transaction_state` (one partition) on three
of them, A (its leader) and the followers X and Y, and the transaction's partitions, each of
one replica, two on the fourth node Z (reached from A) and one on X (cut off from A). The
cut severs A from X and Y both ways, and the producer from X and Y, so that its commit, which
it retries at the coordinator until its deadline, cannot reach the new coordinator and commit
the transaction there: the commit fails, and once X or Y coordinates and has committed a record
of its own (an InitProducerId of another id, where A appended its Prepare) the links are healed
and the producer aborts, as an application whose commit failed does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc

from tidelog import wire
from tidelog.chaos import report as report_mod
from tidelog.chaos.checker import check, read_final_state
from tidelog.chaos.cluster import ProxiedCluster, client_link
from tidelog.chaos.history import OK, UNKNOWN, History, load
from tidelog.chaos.toxiproxy import start_toxiproxy
from tidelog.chaos.workload import Workload, WorkloadConfig
from tidelog.client import Client
from tidelog.coordinator.controller import TRANSACTION_STATE_TOPIC
from tidelog.errors import TidelogError
from tidelog.testing import Raw
from tidelog.types import TopicPartition

__all__ = ["LOST_PREPARE_TOPIC", "lost_prepare"]

T = TypeVar("T")

LOST_PREPARE_TOPIC = "chaos-txn"
_TXN_ID = "chaos-t0"
#: Another transactional id, whose InitProducerId shows the new coordinator serving (known
#: beforehand, so that it needs no new producer id from a controller that may be moving too).
_PROBE_ID = "chaos-probe"
#: The commit's deadline under the cut: the coordinator is reachable, its answer never comes.
_COMMIT_TIMEOUT_MS = 1_500
_WAIT_S = 30.0
#: Longer than the default 300 ms: a node of a loaded machine that misses heartbeats for a
#: moment must not move the coordinator between the moment it is found and the cut.
_ELECTION_TIMEOUT_MS = "1000"


def lost_prepare(out: Path, node_options: dict[str, str] | None = None
                 ) -> report_mod.Report:
    """One committed transaction, then one whose Prepare the coordinator loses (see the
    module's docstring); the history, report and node logs go to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    history = History(out / "history.jsonl")
    options = {"transaction.state.log.num.partitions": "1",
               "election.timeout.ms": _ELECTION_TIMEOUT_MS, **(node_options or {})}
    errors: list[str] = []
    with start_toxiproxy(0) as server, server.client() as proxies, ProxiedCluster(
        4, proxies, **options
    ) as cluster:
        client = Client(cluster.client_bootstrap)
        admin = Client(cluster.bootstrap)
        raw = Raw(cluster)
        workload = Workload(cluster.client_bootstrap,
                            WorkloadConfig(LOST_PREPARE_TOPIC, 8, txn_rate=1.0), history)
        try:
            producer = client.producer(transactional_id=_TXN_ID, acks="all", linger_ms=0)
            producer.init_transactions(timeout_ms=int(_WAIT_S * 1000))  # creates the topic
            with client.producer(transactional_id=_PROBE_ID) as probe:
                # Its producer id now: its next InitProducerId writes without the controller.
                probe.init_transactions(timeout_ms=int(_WAIT_S * 1000))
            state_tp = TopicPartition(TRANSACTION_STATE_TOPIC, 0)
            state = admin.describe_topics([TRANSACTION_STATE_TOPIC])[TRANSACTION_STATE_TOPIC]
            replicas = state.partitions[0].replicas
            (outside,) = set(cluster.node_ids) - set(replicas)
            # One replica each, spread round robin: two partitions on every node.
            admin.create_topic(LOST_PREPARE_TOPIC, partitions=8, replication_factor=1)
            info = admin.describe_topics([LOST_PREPARE_TOPIC])[LOST_PREPARE_TOPIC]
            assignment = {p: part.replicas for p, part in enumerate(info.partitions)}
            on = {node: [p for p, nodes in assignment.items() if nodes == (node,)]
                  for node in cluster.node_ids}
            # Two partitions the markers reach, one they do not: on a follower of the
            # coordinator (or on the coordinator itself, should an election move it before the
            # cut: the markers then reach all three, and no read is torn, only aborted).
            leader = _wait(lambda: cluster.leader_of(state_tp), "a coordinator")
            partitions = [*on[outside][:2], on[min(set(replicas) - {leader})][0]]
            _transact(history, producer, 0, partitions, cut=None)
            followers: list[int] = []
            links: list[str] = []

            def cut() -> None:
                # Who coordinates now (an election may have moved it since the start).
                coordinator = _wait(lambda: cluster.leader_of(state_tp), "a coordinator")
                followers[:] = [n for n in replicas if n != coordinator]
                links[:] = [*cluster.links_between([coordinator], followers),
                            *(client_link(n) for n in followers)]
                for link in links:
                    proxies.disable(link)
                history.info("nemesis", "isolate-txn-coordinator", phase="start",
                             node=coordinator, followers=followers, outside=outside,
                             partitions=partitions, links=links)

            def heal() -> None:
                # A follower coordinates, and has committed a record of its own (another id's
                # InitProducerId) at the index of the old coordinator's Prepare: the Prepare is
                # gone for good. A new leader whose log was all committed appends nothing of
                # its own; healed before, the old coordinator, its log the longer, could win
                # an election and commit the Prepare.
                _wait(lambda: _serving(cluster, raw, state_tp, followers),
                      "a coordinator among the followers serving")
                proxies.reset()
                history.info("nemesis", "isolate-txn-coordinator", phase="stop", links=links)

            _transact(history, producer, 1, partitions, cut=(cut, heal))
            producer.close(timeout_ms=1_000)
            workload.final_txn_read(timeout_s=_WAIT_S)
            errors += workload.errors
            final = read_final_state(cluster, LOST_PREPARE_TOPIC, assignment)
        finally:
            workload.close()
            client.close()
            admin.close()
            raw.close()
            history.close()
            for node in cluster.node_ids:
                (out / f"node-{node}.log").write_text(cluster.logs(node))
    entries = load(history.path)
    replay = "tidelog chaos lost-prepare --out " + str(out) + "".join(
        f" --set {k}={v}" for k, v in sorted((node_options or {}).items()))
    result = report_mod.build(replay, entries, check(entries, final), final, elections=0,
                              errors=errors)
    report_mod.write(result, out)  # no timeline: there are no plain writes to plot
    return result


def _transact(history: History, producer: Any, n: int, partitions: list[int],
              cut: tuple[Callable[[], None], Callable[[], None]] | None) -> None:
    """Transaction ``t0:<n>``, two records on each partition, recorded as the chaos workload
    records its own; with ``cut``, the cut is made once every record is acknowledged (the
    coordinator has every partition), the commit is tried under it, and after the heal the
    transaction is aborted."""
    values = [(p, f"t0:{n}:{k}") for k, p in enumerate(p for p in partitions for _ in range(2))]
    fields: dict[str, Any] = {"txn": f"t0:{n}", "values": values, "commit": True}
    op = history.invoke("t0", "txn", **fields)
    producer.begin_transaction()
    for partition, value in values:
        producer.send(LOST_PREPARE_TOPIC, value.encode(), partition=partition)
    producer.flush(timeout_ms=int(_WAIT_S * 1000))
    if cut is not None:
        cut[0]()
    history.info("t0", "txn_end", txn=fields["txn"])
    try:
        producer.commit_transaction(timeout_ms=_COMMIT_TIMEOUT_MS if cut else None)
    except TidelogError as exc:
        if cut is None:
            raise
        cut[1]()
        try:
            producer.abort_transaction(timeout_ms=int(_WAIT_S * 1000))
        except TidelogError as abort_exc:
            history.complete(op, "t0", "txn", UNKNOWN, committed=False,
                             error=f"{exc}; abort: {abort_exc}", **fields)
            return
        history.complete(op, "t0", "txn", OK, committed=False, error=str(exc), **fields)
        return
    if cut is not None:
        cut[1]()
    history.complete(op, "t0", "txn", OK, committed=True, **fields)


def _serving(cluster: ProxiedCluster, raw: Raw, tp: TopicPartition, followers: list[int]
             ) -> int | None:
    """A leader of `tp` among `followers` that answered an InitProducerId of another id (a
    record it appended and committed), if any."""
    leader = cluster.leader_of(tp)
    if leader not in followers:
        return None
    request = wire.init_producer_id_request(-1, -1, _PROBE_ID, 60_000)
    wire.parse_init_producer_id(raw.stub(leader).InitProducerId(request, timeout=5))
    return leader


def _wait(probe: Callable[[], T | None], what: str) -> T:
    """`probe`'s first answer; an error (a node not answering, or answering with one) is
    "not yet", and the last one is told when the time is up."""
    deadline = time.monotonic() + _WAIT_S
    last: Exception | None = None
    while True:
        try:
            found = probe()
        except (grpc.RpcError, TidelogError) as exc:
            found, last = None, exc
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {_WAIT_S:g}s (last error: {last})")
        time.sleep(0.05)
