"""Faults, and a schedule of them derived from a seed.

Each fault is applied, held, then healed, one at a time, so every effect in the history can be
traced to one cause. Choices that depend on the run (who leads a partition right now) are made
when the fault starts; everything else (which fault, which partition, how long, which links,
how slow) comes from the seeded schedule, so the same seed replays the same plan.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidelog.chaos.cluster import ProxiedCluster, client_link
from tidelog.chaos.history import History
from tidelog.errors import CorruptMessageError
from tidelog.records import HEADER_SIZE, BatchHeader, read_header
from tidelog.types import CONSUMER_OFFSETS_TOPIC, TopicPartition

__all__ = ["COORDINATOR_FAULTS", "LEADER_FAULTS", "NEMESES", "Fault", "NemesisRunner",
           "schedule"]

#: Every fault kind, as named on the command line.
NEMESES = (
    "kill-leader", "kill-random", "pause", "isolate-leader", "partition", "latency", "bandwidth",
    "corrupt-replica", "kill-coordinator", "pause-coordinator", "isolate-coordinator",
)
#: Faults that leave a partition without its leader: their recovery times are reported.
LEADER_FAULTS = ("kill-leader", "isolate-leader")
#: The same faults aimed at the leader of a __consumer_offsets partition (a group
#: coordinator): recovery is the time to the next acknowledged commit of one of its groups.
COORDINATOR_FAULTS = ("kill-coordinator", "pause-coordinator", "isolate-coordinator")


@dataclass(frozen=True)
class Fault:
    """One planned fault: when it starts (seconds into the run), how long it holds, and the
    seeded choices it needs (partition, node draw, cut mode, link subset, rates)."""

    kind: str
    at: float
    hold: float
    partition: int
    draw: float
    params: dict[str, Any] = field(default_factory=dict)


def schedule(seed: int, kinds: list[str], duration: float, partitions: int,
             interval: tuple[float, float], hold: tuple[float, float]) -> list[Fault]:
    """The faults of a run: quiet ``interval``, fault for ``hold``, repeated until ``duration``
    (the last fault heals before it); none without ``kinds`` (a run whose only faults are the
    members' own, or a baseline)."""
    unknown = sorted(set(kinds) - set(NEMESES))
    if unknown:
        raise ValueError(f"unknown nemesis {', '.join(unknown)}; "
                         f"choose from {', '.join(NEMESES)}")
    if not kinds:
        return []
    rng = random.Random(seed)
    faults: list[Fault] = []
    now = rng.uniform(*interval)
    while True:
        kind = rng.choice(kinds)
        length = rng.uniform(*hold)
        if now + length > duration:
            return faults
        params: dict[str, Any] = {}
        if kind in ("isolate-leader", "partition", "isolate-coordinator"):
            params["mode"] = rng.choice(["refuse", "blackhole"])
        elif kind == "latency":
            params["latency"] = rng.randint(20, 200)
            params["jitter"] = rng.randint(5, 100)
            params["share"] = rng.uniform(0.3, 1.0)
        elif kind == "bandwidth":
            params["rate"] = rng.randint(16, 256)  # KB/s
            params["share"] = rng.uniform(0.3, 1.0)
        elif kind == "pause":
            params["leader"] = rng.random() < 0.5
        elif kind == "corrupt-replica":
            params["segment"] = rng.choice(["middle", "active"])
            params["keep"] = rng.uniform(0.0, 0.9)
            params["damage"] = rng.choice(["cut", "flip"])
        faults.append(Fault(kind, now, length, rng.randrange(partitions), rng.random(), params))
        now += length + rng.uniform(*interval)


class NemesisRunner:
    """Plays a schedule against a cluster; ``heal_all`` undoes whatever is left.

    It runs on the calling thread, never on a thread of its own: a node asks the kernel to
    kill it when the thread that started it exits (PR_SET_PDEATHSIG, see ``node.server``), so
    a node restarted from a short-lived thread would die with that thread."""

    def __init__(self, cluster: ProxiedCluster, topic: str, faults: list[Fault],
                 history: History, offsets_partitions: int = 1) -> None:
        self.cluster = cluster
        self.topic = topic
        self.offsets_partitions = offsets_partitions
        self.faults = faults
        self.history = history
        self._killed: set[int] = set()
        self._paused: set[int] = set()
        self.applied = 0

    def run(self, duration: float) -> None:
        """Applies, holds and heals each fault on time, then waits out ``duration``."""
        started = time.monotonic()
        for fault in self.faults:
            time.sleep(max(0.0, started + fault.at - time.monotonic()))
            heal = self._apply(fault)
            time.sleep(fault.hold)
            heal()
        time.sleep(max(0.0, started + duration - time.monotonic()))

    def _record(self, fault: Fault, phase: str, **fields: Any) -> None:
        where = ({"topic": CONSUMER_OFFSETS_TOPIC, "partition": self._offsets_partition(fault)}
                 if fault.kind in COORDINATOR_FAULTS else {"partition": fault.partition})
        self.history.info("nemesis", fault.kind, phase=phase, **where, **fields)

    def _offsets_partition(self, fault: Fault) -> int:
        return fault.partition % self.offsets_partitions

    def _pick(self, fault: Fault, nodes: list[int]) -> int:
        return nodes[int(fault.draw * len(nodes)) % len(nodes)]

    def _leader(self, fault: Fault) -> int:
        """The partition's leader now (of __consumer_offsets for a coordinator fault), else a
        seeded pick (an election is under way)."""
        tp = (TopicPartition(CONSUMER_OFFSETS_TOPIC, self._offsets_partition(fault))
              if fault.kind in COORDINATOR_FAULTS else TopicPartition(self.topic, fault.partition))
        leader = self.cluster.leader_of(tp)
        return leader if leader is not None else self._pick(fault, self.cluster.node_ids)

    def _apply(self, fault: Fault) -> Callable[[], None]:
        """Starts one fault and returns what heals it."""
        cluster = self.cluster
        self.applied += 1
        kind = fault.kind
        if kind in ("kill-leader", "kill-random", "kill-coordinator"):
            node = self._pick(fault, cluster.node_ids) if kind == "kill-random" else self._leader(
                fault)
            cluster.kill(node)
            self._killed.add(node)
            self._record(fault, "start", node=node)

            def restart() -> None:
                cluster.restart(node)  # the fault ends when the node serves again
                self._killed.discard(node)
                self._record(fault, "stop", node=node)

            return restart
        if kind == "corrupt-replica":
            node = self._pick(fault, cluster.node_ids)
            cluster.kill(node)
            self._killed.add(node)
            self._record(fault, "start", node=node)

            def damage_and_restart() -> None:
                directory = cluster.data_dir / f"node-{node}" / f"{self.topic}-{fault.partition}"
                damage_segment = flip_byte if fault.params["damage"] == "flip" else cut_segment
                damage = damage_segment(directory, fault.params["segment"], fault.params["keep"])
                self._record(fault, "damage", node=node, **damage)
                cluster.restart(node)
                self._killed.discard(node)
                self._record(fault, "stop", node=node)

            return damage_and_restart
        if kind in ("pause", "pause-coordinator"):
            node = self._pick(fault, cluster.node_ids) if kind == "pause" and not fault.params[
                "leader"] else self._leader(fault)
            cluster.pause(node)
            self._paused.add(node)
            self._record(fault, "start", node=node)

            def resume() -> None:
                cluster.resume(node)
                self._paused.discard(node)
                self._record(fault, "stop", node=node)

            return resume
        if kind in ("isolate-leader", "partition", "isolate-coordinator"):
            node = self._pick(fault, cluster.node_ids) if kind == "partition" else self._leader(
                fault)
            rest = [n for n in cluster.node_ids if n != node]
            # A minority of one for three nodes; for five, the victim and one more.
            group = [node, *rest[: (len(cluster.node_ids) - 1) // 2 - 1]]
            others = [n for n in cluster.node_ids if n not in group]
            links = cluster.links_between(group, others)
            self._cut(links, fault.params["mode"])
            self._record(fault, "start", node=node, nodes=group, mode=fault.params["mode"])
            return lambda: self._restore(fault, links, node=node, nodes=group)
        if kind in ("latency", "bandwidth"):
            rng = random.Random(fault.draw)
            every = cluster.all_peer_links() + [client_link(n) for n in cluster.node_ids]
            links = sorted(rng.sample(every, max(1, round(len(every) * fault.params["share"]))))
            attributes = (
                {"latency": fault.params["latency"], "jitter": fault.params["jitter"]}
                if kind == "latency" else {"rate": fault.params["rate"]}
            )
            for link in links:
                for stream in ("upstream", "downstream"):
                    cluster.proxies.add_toxic(link, kind, name=f"{kind}_{stream}",
                                              stream=stream, attributes=attributes)
            self._record(fault, "start", links=links, **attributes)
            return lambda: self._restore(fault, links)
        raise ValueError(f"unknown nemesis {kind}")

    def _cut(self, links: list[str], mode: str) -> None:
        """``refuse`` closes the links and refuses new connections (a crash-like cut);
        ``blackhole`` keeps them open and drops every byte (a silent partition)."""
        for link in links:
            if mode == "refuse":
                self.cluster.proxies.disable(link)
            else:
                for stream in ("upstream", "downstream"):
                    self.cluster.proxies.add_toxic(link, "timeout", name=f"cut_{stream}",
                                                   stream=stream, attributes={"timeout": 0})

    def _restore(self, fault: Fault, links: list[str], **fields: Any) -> None:
        for link in links:
            self.cluster.proxies.enable(link)
            for toxic in self.cluster.proxies.toxics(link):
                self.cluster.proxies.remove_toxic(link, toxic.name)
        self._record(fault, "stop", links=links, **fields)

    def heal_all(self) -> None:
        """Every proxy clean and enabled, every node running and awake."""
        self.cluster.proxies.reset()
        for node in sorted(self._paused):
            self.cluster.resume(node)
        for node in sorted(self._killed):
            self.cluster.restart(node, wait=False)
        self._paused.clear()
        self._killed.clear()
        self.history.info("nemesis", "heal", phase="stop")


def _victim(directory: Path, which: str) -> Path | None:
    """The middle segment of a partition replica, or the active one (also when there are
    fewer than three)."""
    segments = sorted(directory.glob("*.log"))
    if not segments:
        return None
    return segments[len(segments) // 2] if which == "middle" and len(segments) >= 3 \
        else segments[-1]


def cut_segment(directory: Path, which: str, keep: float) -> dict[str, Any]:
    """Storage damage done while a node is down: the middle segment of a partition replica
    (the active one when there are fewer than three) is cut to ``keep`` of its size, as a
    lost or torn write of a bad disk would leave it. The node finds the cut at startup and
    must be repaired from the others without any acknowledged write being lost."""
    victim = _victim(directory, which)
    if victim is None:
        return {"file": None}
    size = victim.stat().st_size
    with victim.open("r+b") as handle:
        handle.truncate(int(size * keep))
    return {"file": victim.name, "size": size, "cut_to": int(size * keep)}


def flip_byte(directory: Path, which: str, where: float) -> dict[str, Any]:
    """Storage damage done while a node is down, that no restart notices: one bit flipped in
    the records of a batch (``where`` picks the batch along the segment, and the byte in it),
    as a bad sector would. Below the recovery point (the middle segment) only the scrubber
    finds it; in the active segment, recovery after the kill does. The flip stays inside the
    records, which the CRC covers: a batch's base offset and leader epoch are outside it (as
    in Kafka), so no check of the batch alone could see a flip there."""
    victim = _victim(directory, which)
    if victim is None:
        return {"file": None}
    data = victim.read_bytes()
    batches: list[tuple[int, BatchHeader]] = []
    pos = 0
    while True:
        try:
            header = read_header(data, pos)
        except CorruptMessageError:
            break
        batches.append((pos, header))
        pos += header.size
    batches = [(p, h) for p, h in batches if h.size > HEADER_SIZE]  # some record bytes
    if not batches:
        return {"file": None}
    pos, header = batches[int(where * len(batches)) % len(batches)]
    at = pos + HEADER_SIZE + int(where * 1_000_003) % (header.size - HEADER_SIZE)
    with victim.open("r+b") as handle:
        handle.seek(at)
        handle.write(bytes([data[at] ^ 0x04]))
    return {"file": victim.name, "flipped_at": at, "batch_offset": header.base_offset}
