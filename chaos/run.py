"""One chaos run end to end: proxies, cluster, workload, nemesis, heal, drain, check, report.

Everything a run leaves goes to its output directory: the history (``history.jsonl``), the
report (``report.json``, ``report.txt``, ``timeline.png``) and each node's log, so a failure can
be studied after the cluster is gone.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.chaos import report as report_mod
from tidelog.chaos.checker import check, read_final_state
from tidelog.chaos.cluster import ProxiedCluster
from tidelog.chaos.history import History, load
from tidelog.chaos.nemesis import NemesisRunner, schedule
from tidelog.chaos.toxiproxy import start_toxiproxy
from tidelog.chaos.workload import Workload, WorkloadConfig
from tidelog.client import Client

__all__ = ["RunConfig", "run"]

TOPIC = "chaos"
#: With members: sessions short enough that a killed member's partitions move within the run
#: (Kafka's 45 s would hold them past most of it).
MEMBER_NODE_OPTIONS = {"group.consumer.session.timeout.ms": "6000",
                       "group.consumer.heartbeat.interval.ms": "500"}


@dataclass(frozen=True)
class RunConfig:
    seed: int
    duration: float
    nemeses: tuple[str, ...]
    out: Path
    nodes: int = 3
    partitions: int = 3
    rate: float = 100.0
    #: The producers' delivery.timeout.ms: shorter means more writes end unknown.
    delivery_timeout_ms: int = 20_000
    #: Quiet seconds between two faults, drawn uniformly from this range.
    interval: tuple[float, float] = (2.0, 5.0)
    #: Seconds each fault holds, drawn uniformly from this range.
    hold: tuple[float, float] = (2.0, 6.0)
    #: Extra node settings (Kafka-style keys), e.g. the test-only planted bug.
    node_options: dict[str, str] = field(default_factory=dict)
    #: Consumer-offset commits per second (each one set over every partition); 0: none, and
    #: no fetches of them either.
    commit_rate: float = 20.0
    #: Partitions of __consumer_offsets (few: every coordinator then has groups to lose).
    offsets_partitions: int = 2
    #: Consumer-group member processes subscribed to the topic, and how often one is killed
    #: (0: never).
    members: int = 0
    member_kill_interval_s: float = 0.0
    #: How often a member joins while the others are paused (0: never).
    member_join_interval_s: float = 0.0
    #: Transactions per second (over several partitions, some aborted), read by read_committed
    #: consumers; 0: none.
    txn_rate: float = 10.0

    def replay_command(self) -> str:
        """The command line that runs this same plan again."""
        words = ["tidelog", "chaos", "run", "--duration", f"{self.duration:g}",
                 "--nemesis", ",".join(self.nemeses) or "none", "--seed", str(self.seed),
                 "--out", str(self.out)]
        defaults = RunConfig(0, 0, (), Path())
        for flag, value, default in (
            ("--nodes", self.nodes, defaults.nodes),
            ("--partitions", self.partitions, defaults.partitions),
            ("--rate", self.rate, defaults.rate),
            ("--delivery-timeout-ms", self.delivery_timeout_ms, defaults.delivery_timeout_ms),
            ("--interval", self.interval, defaults.interval),
            ("--hold", self.hold, defaults.hold),
            ("--commit-rate", self.commit_rate, defaults.commit_rate),
            ("--offsets-partitions", self.offsets_partitions, defaults.offsets_partitions),
            ("--members", self.members, defaults.members),
            ("--member-kill-interval", self.member_kill_interval_s,
             defaults.member_kill_interval_s),
            ("--member-join-interval", self.member_join_interval_s,
             defaults.member_join_interval_s),
            ("--txn-rate", self.txn_rate, defaults.txn_rate),
        ):
            if value != default:
                text = f"{value[0]:g}:{value[1]:g}" if isinstance(value, tuple) else f"{value:g}"
                words += [flag, text]
        for key, setting in sorted(self.node_options.items()):
            words += ["--set", f"{key}={setting}"]
        return shlex.join(words)


def run(config: RunConfig, progress: Callable[[str], None] = lambda _: None
        ) -> report_mod.Report:
    config.out.mkdir(parents=True, exist_ok=True)
    faults = schedule(config.seed, list(config.nemeses), config.duration, config.partitions,
                      config.interval, config.hold)
    history = History(config.out / "history.jsonl")
    node_options = {"offsets.topic.num.partitions": str(config.offsets_partitions),
                    **(MEMBER_NODE_OPTIONS if config.members else {}),
                    **config.node_options}
    with start_toxiproxy(config.seed) as server, server.client() as proxies, ProxiedCluster(
        config.nodes, proxies, **node_options
    ) as cluster:
        workload = Workload(
            cluster.client_bootstrap,
            WorkloadConfig(TOPIC, config.partitions, rate=config.rate, seed=config.seed,
                           delivery_timeout_ms=config.delivery_timeout_ms,
                           commit_rate=config.commit_rate,
                           offsets_partitions=config.offsets_partitions,
                           members=config.members,
                           member_kill_interval_s=config.member_kill_interval_s,
                           member_join_interval_s=config.member_join_interval_s,
                           txn_rate=config.txn_rate),
            history,
        )
        try:
            progress(f"cluster of {config.nodes} up (toxiproxy: {server.kind}); "
                     f"{len(faults)} faults planned")
            with Client(cluster.bootstrap) as admin:
                admin.create_topic(TOPIC, partitions=config.partitions,
                                   replication_factor=min(3, config.nodes))
                info = admin.describe_topics([TOPIC])[TOPIC]
                assignment = {p: part.replicas for p, part in enumerate(info.partitions)}
                epochs_before = _epochs(admin)
                if config.commit_rate > 0:
                    for group in workload.groups:  # creates __consumer_offsets, waits for it
                        admin.admin.find_coordinator(group, timeout_ms=60_000)
            nemesis = NemesisRunner(cluster, TOPIC, faults, history, config.offsets_partitions)
            workload.start()
            history.info("run", "start", seed=config.seed)
            try:
                nemesis.run(config.duration)
            finally:
                nemesis.heal_all()
                workload.stop_member_faults()
            progress(f"healed after {nemesis.applied} faults; draining")
            cluster.wait_ready(60)
            workload.stop_writes(drain_timeout_s=60)
            workload.stop_reads()
            workload.final_fetches(timeout_s=60)
            workload.final_txn_read(timeout_s=60)
            history.info("run", "drained")
            final = read_final_state(cluster, TOPIC, assignment)
            workload.finish_members(final.data_offsets(), timeout_s=60)
            with Client(cluster.bootstrap) as admin:
                epochs_after = _epochs(admin)
        finally:
            workload.close()
            history.close()
            for node in cluster.node_ids:
                (config.out / f"node-{node}.log").write_text(cluster.logs(node))
    final.dump(config.out / "final-logs.jsonl")
    entries = load(history.path)
    invariants = check(entries, final)
    result = report_mod.build(
        config.replay_command(), entries, invariants, final,
        elections=sum(epochs_after[p] - epochs_before[p] for p in epochs_after),
        errors=workload.errors,
    )
    report_mod.write(result, config.out)
    report_mod.timeline(entries, config.out / "timeline.png")
    return result


def _epochs(client: Client) -> dict[int, int]:
    info = client.describe_topics([TOPIC])[TOPIC]
    return {p: part.leader_epoch for p, part in enumerate(info.partitions)}
