"""The report of a chaos run: a verdict per invariant, counts, unavailability, and a timeline.

Unavailability of a partition is measured from the client's side: a gap between two successful
acknowledgements (or from the first write to the first acknowledgement) while writes to it were
waiting. After each leader fault, recovery is the time from the fault to the first
acknowledgement of a write sent after it; these are the figures quoted for failover. After a
fault on a group coordinator, recovery is the time to the first acknowledged commit, sent after
the fault, of a group that coordinator served.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidelog.chaos.checker import FinalState, Invariant, summarize_writes
from tidelog.chaos.history import INFO, OK, operations
from tidelog.chaos.nemesis import COORDINATOR_FAULTS, LEADER_FAULTS

__all__ = ["Report", "build", "write"]

#: Gaps between acknowledgements shorter than this are the workload's pace, not an outage.
_GAP_S = 0.5


@dataclass
class Report:
    replay: str
    invariants: list[Invariant]
    writes: dict[str, int]
    reads: dict[str, int]
    #: "offset_commit ok", "offset_fetch fail", ...: consumer-offset operations by outcome.
    offsets: dict[str, int]
    nemesis_events: dict[str, int]
    elections: int
    #: partition -> {"max_s", "total_s"}
    unavailability: dict[int, dict[str, float]]
    #: fault kind -> recovery seconds of each occurrence
    recovery: dict[str, list[float]]
    converged_after: float | None
    errors: list[str] = field(default_factory=list)
    #: "txn committed", "txn aborted", "txn unknown", "txn_poll ok", ...: transactions by
    #: outcome, and the read_committed polls.
    transactions: dict[str, int] = field(default_factory=dict)
    #: "member_start", "member_kill", "member_pause" (a join while the others were paused),
    #: "assigned" (listener calls that added partitions), "records" (records the members
    #: returned): what the consumer-group invariants were checked against.
    members: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(i.ok for i in self.invariants) and not self.errors

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "replay": self.replay,
            "invariants": [i.to_json() for i in self.invariants],
            "writes": self.writes, "reads": self.reads, "offsets": self.offsets,
            "transactions": self.transactions, "members": self.members,
            "nemesis_events": self.nemesis_events,
            "elections": self.elections,
            "unavailability_s": {str(p): v for p, v in self.unavailability.items()},
            "recovery_s": {k: {"count": len(v), "p50": percentile(v, 0.5),
                               "p99": percentile(v, 0.99), "all": v}
                           for k, v in self.recovery.items()},
            "replicas_converged_after_s": self.converged_after,
            "errors": self.errors,
        }

    def text(self) -> str:
        lines = [f"verdict: {'PASS' if self.ok else 'FAIL'}"]
        for inv in self.invariants:
            lines.append(f"  {'ok  ' if inv.ok else 'FAIL'} {inv.name}: {inv.description}")
            lines += [f"         {v}" for v in inv.violations]
            if inv.count > len(inv.violations):
                lines.append(f"         ... {inv.count} violations in all")
        lines += [f"  ERROR {e}" for e in self.errors]
        writes = ", ".join(f"{k} {v}" for k, v in self.writes.items())
        reads = ", ".join(f"{k} {v}" for k, v in self.reads.items())
        offsets = ", ".join(f"{k} {v}" for k, v in self.offsets.items())
        events = ", ".join(f"{k} {v}" for k, v in sorted(self.nemesis_events.items()))
        txns = ", ".join(f"{k} {v}" for k, v in self.transactions.items())
        members = ", ".join(f"{k} {v}" for k, v in self.members.items())
        lines += [f"writes: {writes}", f"reads: {reads}", f"consumer offsets: {offsets or 'none'}",
                  f"transactions: {txns or 'none'}", f"group members: {members or 'none'}",
                  f"nemesis events: {sum(self.nemesis_events.values())} ({events or 'none'})",
                  f"elections (leader epochs gained): {self.elections}"]
        for p, u in sorted(self.unavailability.items()):
            lines.append(f"unavailability p{p}: max {u['max_s']:.2f}s, total {u['total_s']:.2f}s")
        for kind, values in sorted(self.recovery.items()):
            lines.append(f"recovery after {kind}: p50 {percentile(values, 0.5):.2f}s, "
                         f"p99 {percentile(values, 0.99):.2f}s over {len(values)}")
        lines.append(f"replay: {self.replay}")
        return "\n".join(lines)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def build(replay: str, entries: list[dict[str, Any]], invariants: list[Invariant],
          final: FinalState, *, elections: int, errors: list[str]) -> Report:
    reads: Counter[str] = Counter()
    for f in ("list_offsets", "poll"):
        for op in operations(entries, f):
            reads[f"{f} {op.outcome}"] += 1
    offsets: Counter[str] = Counter()
    for f in ("offset_commit", "offset_fetch"):
        for op in operations(entries, f):
            offsets[f"{f} {op.outcome}"] += 1
    transactions: Counter[str] = Counter()
    for op in operations(entries, "txn"):
        outcome = op.outcome if op.outcome != OK else (
            "committed" if op.get("committed") else "aborted")
        transactions[f"txn {outcome}"] += 1
    for op in operations(entries, "txn_poll"):
        transactions[f"txn_poll {op.outcome}"] += 1
    members: Counter[str] = Counter()
    for entry in entries:
        if entry.get("f") in ("member_start", "member_kill", "member_pause"):
            members[entry["f"]] += 1
        elif entry.get("f") == "member" and entry["ev"] == "assigned" and entry["p"]:
            members["assigned"] += 1
        elif entry.get("f") == "member" and entry["ev"] == "recs":
            members["records"] += len(entry["r"])
    faults = [e for e in entries if e["type"] == INFO and e["process"] == "nemesis"
              and e.get("phase") == "start"]
    return Report(
        replay=replay, invariants=invariants, writes=summarize_writes(entries),
        reads=dict(sorted(reads.items())), offsets=dict(sorted(offsets.items())),
        nemesis_events=dict(Counter(e["f"] for e in faults)), elections=elections,
        unavailability=_unavailability(entries), recovery=_recovery(entries, faults),
        converged_after=final.converged_after, errors=errors,
        transactions=dict(sorted(transactions.items())), members=dict(sorted(members.items())),
    )


def _unavailability(entries: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    writes = list(operations(entries, "write"))
    out: dict[int, dict[str, float]] = {}
    for partition in sorted({op.invoke["partition"] for op in writes}):
        mine = [op for op in writes if op.invoke["partition"] == partition]
        acks = sorted(op.end for op in mine if op.outcome == OK and op.end is not None)
        invokes = sorted(op.start for op in mine)
        gaps: list[float] = []
        previous = invokes[0] if invokes else 0.0
        for ack in acks:
            # Only time while a write was waiting counts: the first invoke after the last ack.
            waiting_since = _first_at_or_after(invokes, previous)
            if waiting_since is not None and ack - waiting_since > _GAP_S:
                gaps.append(ack - waiting_since)
            previous = ack
        out[partition] = {"max_s": max(gaps, default=0.0), "total_s": sum(gaps)}
    return out


def _first_at_or_after(values: list[float], t: float) -> float | None:
    i = bisect.bisect_left(values, t)
    return values[i] if i < len(values) else None


def _recovery(entries: list[dict[str, Any]], faults: list[dict[str, Any]]
              ) -> dict[str, list[float]]:
    by_partition: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for op in operations(entries, "write"):
        if op.outcome == OK and op.end is not None:
            by_partition[op.invoke["partition"]].append((op.start, op.end))
    by_coordinator: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for op in operations(entries, "offset_commit"):
        if op.outcome == OK and op.end is not None:
            by_coordinator[op.invoke["offsets_partition"]].append((op.start, op.end))
    out: dict[str, list[float]] = defaultdict(list)
    for fault in faults:
        if fault["f"] in LEADER_FAULTS:
            acks = by_partition[fault["partition"]]
        elif fault["f"] in COORDINATOR_FAULTS:
            acks = by_coordinator[fault["partition"]]
        else:
            continue
        after = [end for start, end in acks if start >= fault["mono"]]
        if after:
            out[fault["f"]].append(round(min(after) - fault["mono"], 3))
    return dict(out)


def write(report: Report, out: Path) -> None:
    (out / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    (out / "report.txt").write_text(report.text() + "\n")


_COLOURS = {
    "kill-leader": "tab:red", "kill-random": "tab:orange", "pause": "tab:purple",
    "isolate-leader": "tab:brown", "partition": "tab:pink", "latency": "tab:olive",
    "bandwidth": "tab:cyan", "corrupt-replica": "tab:gray", "kill-coordinator": "darkred",
    "pause-coordinator": "indigo", "isolate-coordinator": "saddlebrown",
}


def timeline(entries: list[dict[str, Any]], path: Path) -> None:
    """Acknowledged writes per second and write latency over time, faults shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    origin = min((e["mono"] for e in entries), default=0.0)
    writes = list(operations(entries, "write"))
    oks = [op for op in writes if op.outcome == OK and op.end is not None]
    bad = [op for op in writes if op.outcome != OK]
    end = max((e["mono"] for e in entries), default=origin) - origin
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(16, 7), sharex=True,
                                      gridspec_kw={"height_ratios": [1, 1]})
    width = max(1, round(end / 300))  # seconds per bin: about 300 bins whatever the length
    bins = max(1, int(end / width) + 1)
    span = bins * width
    per_partition: dict[int, list[float]] = defaultdict(list)
    for op in oks:
        per_partition[op.invoke["partition"]].append((op.end or 0.0) - origin)
    for partition, times in sorted(per_partition.items()):
        top.hist(times, bins=bins, range=(0, span), histtype="step", linewidth=1.2,
                 label=f"p{partition} acks/s", weights=[1 / width] * len(times))
    if bad:
        top.hist([op.start - origin for op in bad], bins=bins, range=(0, span),
                 histtype="stepfilled", alpha=0.6, color="black",
                 label="unknown/failed writes/s (by send time)", weights=[1 / width] * len(bad))
    top.set_ylabel("acknowledged writes / s")
    top.set_title("Tidelog chaos run: throughput and acks=all write latency")
    bottom.scatter([(op.end or 0.0) - origin for op in oks],
                   [max((op.end or 0.0) - op.start, 1e-4) * 1000 for op in oks],
                   s=3, alpha=0.4, color="tab:blue", label="write latency (at ack)")
    bottom.set_yscale("log")
    bottom.set_ylabel("latency (ms, log)")
    bottom.set_xlabel("seconds since start")
    starts: dict[tuple[str, int], float] = {}
    labelled: set[str] = set()
    for e in entries:
        if e["type"] != INFO or e["process"] != "nemesis" or e["f"] == "heal":
            continue
        key = (e["f"], e.get("partition", 0))
        if e.get("phase") == "start":
            starts[key] = e["mono"] - origin
        elif key in starts:
            begin = starts.pop(key)
            label = e["f"] if e["f"] not in labelled else None
            labelled.add(e["f"])
            for axis in (top, bottom):
                axis.axvspan(begin, e["mono"] - origin, color=_COLOURS.get(e["f"], "grey"),
                             alpha=0.25, label=label if axis is top else None)
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
