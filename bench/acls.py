"""What authorization costs ListOffsets (issue 17): p50 latency of a one-partition ListOffsets
on a real node with 1,000 ACLs, beside the same request with no ACLs (both nodes with
authorizer=acl and allow.everyone.if.no.acl.found=true), in one run.

Two one-node clusters side by side, one topic each; the calls are raw gRPC from this process
(a blocking stub, one call at a time), so the figure compares two server paths. One cluster
holds the 1,000 ACLs (created in one CreateAcls: they commit as one batch), the other none, and
the calls alternate between them one by one, so both sides see the same moments of a shared
machine's load. After each round the ACLs move to the other cluster (a DeleteAcls there, a
CreateAcls here), so that neither process's luck is counted as the ACLs' cost; the p50 of each
side is over all its calls of all ``--rounds`` rounds.
The 1,000 ACLs are a mix a real cluster could hold: literal ACLs on 600 other topics for 50
principals, 200 prefixed ones (prefix lengths 1 to 12, some of them prefixes of the measured
topic, so the decision walks the prefix lookup and finds bindings), 150 on groups, and
literal-``*`` and ``User:*`` bindings that apply to every topic, including the ALLOW DESCRIBE
for User:ANONYMOUS that keeps the measured lookup served.

Also printed: the cost of one decision in process (the node's `Authorizer` over an index of the
same 1,000 ACLs), so the latency figure can be read against what the decision itself takes.

Run: ``.venv/bin/python bench/acls.py [--quick] [--calls N] [--rounds N]``. ``--quick`` is a
smoke test (seconds) whose figures mean little. Figures are printed, never asserted: exit 1
only when something went wrong (an answer with an error, ACLs that did not apply).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path; keep the repository's.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import grpc  # noqa: E402

from tidelog import Client  # noqa: E402
from tidelog.acl import (  # noqa: E402
    ANY_ACL,
    WILDCARD,
    AccessControlEntry,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from tidelog.coordinator.acls import AclIndex, Authorizer  # noqa: E402
from tidelog.testing import LocalCluster, Raw, wait_for  # noqa: E402
from tidelog.v1 import tidelog_pb2 as pb  # noqa: E402
from tidelog.v1 import tidelog_pb2_grpc  # noqa: E402

TOPIC = "bench-offsets"
ANONYMOUS = "User:ANONYMOUS"
ACL_COUNT = 1000


def thousand_acls() -> list[AclBinding]:
    """1,000 distinct bindings; see the module docstring."""
    ops = [Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.ALTER]

    def binding(kind: ResourceType, name: str, pattern: PatternType, principal: str,
                op: Operation, permission: Permission = Permission.ALLOW) -> AclBinding:
        return AclBinding(ResourcePattern(kind, name, pattern),
                          AccessControlEntry(principal, op, permission))

    out = [
        binding(ResourceType.TOPIC, f"topic-{i}", PatternType.LITERAL, f"User:user-{i % 50}",
                ops[i % 4])
        for i in range(600)
    ]
    prefixes = [TOPIC[:n] for n in range(1, 13)]  # "b" .. "bench-offset"
    out += [
        binding(ResourceType.TOPIC, prefixes[i % 12] if i % 4 == 0 else f"other{i}-",
                PatternType.PREFIXED, f"User:user-{i % 50}", ops[i % 4],
                Permission.DENY if i % 8 == 4 else Permission.ALLOW)
        for i in range(200)
    ]
    out += [
        binding(ResourceType.GROUP, f"group-{i}", PatternType.LITERAL, f"User:user-{i % 50}",
                Operation.READ)
        for i in range(150)
    ]
    out += [
        binding(ResourceType.TOPIC, WILDCARD, PatternType.LITERAL, f"User:user-{i}",
                Operation.DESCRIBE)
        for i in range(48)
    ]
    out += [
        binding(ResourceType.TOPIC, WILDCARD, PatternType.LITERAL, ANONYMOUS, Operation.DESCRIBE),
        binding(ResourceType.TOPIC, WILDCARD, PatternType.LITERAL, "User:*", Operation.READ),
    ]
    assert len(set(out)) == ACL_COUNT
    return out


def latencies(stub: tidelog_pb2_grpc.TidelogStub, calls: int) -> list[int]:
    """Latency in ns of `calls` one-partition ListOffsets (latest), each checked."""
    request = pb.ListOffsetsRequest(topics=[
        pb.ListOffsetsTopic(name=TOPIC, partitions=[pb.ListOffsetsPartition(timestamp=-1)])
    ])
    out = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        answer = stub.ListOffsets(request, timeout=10)
        out.append(time.perf_counter_ns() - start)
        code = answer.topics[0].partitions[0].error_code
        if code:
            raise SystemExit(f"ListOffsets answered error {code}")
    return out


def decision_ns(acls: list[AclBinding], repeat: int) -> float:
    """Mean ns of one in-process decision for the measured topic over the same ACLs."""
    index = AclIndex()
    for i, binding in enumerate(acls, start=1):
        index.add(i, binding)
    authorizer = Authorizer(index)
    start = time.perf_counter_ns()
    for _ in range(repeat):
        authorizer.authorize(ANONYMOUS, Operation.DESCRIBE, ResourceType.TOPIC, TOPIC)
    return (time.perf_counter_ns() - start) / repeat


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test: tiny sizes")
    parser.add_argument("--calls", type=int, default=None, help="calls per slice")
    parser.add_argument("--rounds", type=int, default=None, help="slices per side")
    args = parser.parse_args()
    calls = args.calls or (50 if args.quick else 5000)
    rounds = args.rounds or (2 if args.quick else 4)
    acls = thousand_acls()
    print(f"bench/acls.py at {datetime.now(UTC):%Y-%m-%d %H:%M UTC} on {platform.node()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {rounds} rounds of {calls} "
          f"calls per side")
    sides: dict[str, list[int]] = {"no ACLs": [], f"{ACL_COUNT} ACLs": []}
    with contextlib.ExitStack() as stack:
        nodes = []
        for _ in range(2):
            # The authorizer on, and open where no ACL applies, as the "no ACLs" side needs.
            cluster = stack.enter_context(LocalCluster(
                1, log_flush_policy="never", authorizer="acl",
                allow_everyone_if_no_acl_found="true"))
            raw = stack.enter_context(Raw(cluster))
            client = stack.enter_context(Client(cluster.bootstrap))
            raw.create_topic(TOPIC, 1, 1)
            raw.produce_acknowledged(TOPIC, 0, [[b"x"] * 10])
            nodes.append((raw.stub(1), client))
            latencies(raw.stub(1), max(calls // 10, 10))  # warm-up: connection, caches
        for round_ in range(rounds):
            (plain, plain_client), (guarded, guarded_client) = (
                nodes if round_ % 2 == 0 else nodes[::-1]
            )
            if round_ > 0 and len(plain_client.admin.delete_acls([ANY_ACL])) != ACL_COUNT:
                print(f"the ACLs of round {round_ - 1} were not all deleted")
                return 1
            guarded_client.admin.create_acls(acls)
            wait_for(lambda stub=guarded: len(stub.DescribeAcls(
                pb.DescribeAclsRequest(), timeout=10).resources) > 0, 30, "the ACLs applied")
            for _ in range(calls):
                sides["no ACLs"] += latencies(plain, 1)
                sides[f"{ACL_COUNT} ACLs"] += latencies(guarded, 1)
    p50 = {side: statistics.median(ns) / 1000 for side, ns in sides.items()}
    for side, value in p50.items():
        print(f"ListOffsets p50 with {side}: {value:.0f} us over {len(sides[side])} calls")
    base, with_acls = p50.values()
    print(f"ratio ListOffsets p50 {ACL_COUNT} ACLs/no ACLs: {with_acls / base:.3f}")
    print(f"one decision over {ACL_COUNT} ACLs, in process: "
          f"{decision_ns(acls, 2000 if args.quick else 200_000):.0f} ns")
    print(f"one decision over no ACLs, in process: "
          f"{decision_ns([], 2000 if args.quick else 200_000):.0f} ns")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except grpc.RpcError as exc:
        print(f"a call failed: {exc}")
        sys.exit(1)
