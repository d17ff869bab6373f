"""What `tidelog topic`, `offsets`, `consume` and `acls` tell an operator when the request is
odd or refused: a partition count the cluster cannot take is refused at once, a topic just
created is described with its in-sync replicas, a topic the caller may not describe is an
authorization error (not "does not exist"), and an ACL that would shut the caller out of ACL
administration is refused with the way back.

One 3-node cluster with the ACL authorizer on; with allow.everyone.if.no.acl.found=true,
ANONYMOUS (every plaintext caller) may do what no ACL speaks of, so the module's ACLs close
only the resources they name.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tidelog import Client
from tidelog.acl import AccessControlEntry, AclBinding, Operation, Permission, ResourcePattern
from tidelog.acl import ResourceType as Kind
from tidelog.configs import NewPartitions
from tidelog.testing import LocalCluster, Raw

pytestmark = pytest.mark.timeout(240)

NUM_PARTITIONS = 2


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"num_partitions": NUM_PARTITIONS, "authorizer": "acl",
            "allow_everyone_if_no_acl_found": "true"}


def tidelog(cluster: LocalCluster, *args: str) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", *args, "--bootstrap", cluster.bootstrap,
         "--timeout-ms", "20000"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("flag", ["--partitions", "--replication-factor"])
@pytest.mark.parametrize("value", ["-1", "0"])
def test_a_count_below_one_is_refused_before_anything_is_created(
    cluster: LocalCluster, flag: str, value: str
) -> None:
    """Before: --partitions -1 created the topic (-1 is the node's default on the wire) and
    then waited for -1 partitions to have leaders, REQUEST_TIMED_OUT after the deadline."""
    name = f"count-{flag.strip('-')}-{value.strip('-')}"
    code, _, err = tidelog(cluster, "topic", "create", name, flag, value)
    assert code == 2, err
    assert f"{flag} must be at least 1" in err and "Traceback" not in err, err
    assert name not in tidelog(cluster, "topic", "list")[1].split()


def test_leaving_the_count_out_takes_the_nodes_default(cluster: LocalCluster) -> None:
    code, out, err = tidelog(cluster, "topic", "create", "count-default")
    assert code == 0, err
    assert f"with {NUM_PARTITIONS} partition(s)" in out
    with Client(cluster.bootstrap) as client:  # the client API's -1 is the same default
        client.create_topic("count-default-api", partitions=-1)
        assert len(client.describe_topics(["count-default-api"])["count-default-api"]
                   .partitions) == NUM_PARTITIONS


def test_every_node_knows_the_isr_once_create_or_alter_returns(
    cluster: LocalCluster, raw: Raw
) -> None:
    """Before: a node that knew a new partition's leader from its own replica, but had not yet
    heard the leader's announcement, answered Metadata with an empty ISR, and `topic describe`
    right after `topic create` could show it."""
    with Client(cluster.bootstrap) as client:
        for i in range(4):
            name = f"isr-{i}"
            client.create_topic(name, partitions=3, replication_factor=3)
            client.admin.create_partitions({name: NewPartitions(6)})
            for node in cluster.node_ids:
                partitions = raw.metadata(node, name).partitions
                assert len(partitions) == 6
                assert all(p.isr for p in partitions), (node, partitions)


def test_a_topic_the_caller_may_not_describe_is_an_authorization_error(
    cluster: LocalCluster,
) -> None:
    """An ACL for another principal closes the topic to ANONYMOUS. Before: describe, offsets
    and consume said the topic does not exist, where produce said TOPIC_AUTHORIZATION_FAILED."""
    with Client(cluster.bootstrap) as client:
        client.create_topic("closed", partitions=1)
        client.admin.create_acls([AclBinding(
            ResourcePattern(Kind.TOPIC, "closed"),
            AccessControlEntry("User:alice", Operation.ALL, Permission.ALLOW))])
    for args in (("topic", "describe", "closed"), ("offsets", "closed"),
                 ("consume", "closed", "--max-records", "1"), ("produce", "closed", "v")):
        code, _, err = tidelog(cluster, *args)
        assert code == 2, (args, err)
        assert "TOPIC_AUTHORIZATION_FAILED (29)" in err and "closed" in err, (args, err)
        assert "does not exist" not in err and "Traceback" not in err, (args, err)


def test_an_acl_that_shuts_the_caller_out_of_acl_administration_needs_force(
    cluster: LocalCluster,
) -> None:
    """Before: one `acls add --cluster --allow-principal User:admin` over plaintext left
    ANONYMOUS without ALTER on the cluster, and no later command could remove it (and so did
    removing ANONYMOUS's own grant beside another principal's)."""
    code, _, err = tidelog(cluster, "acls", "add", "--cluster", "--allow-principal",
                           "User:admin")
    assert code == 2, err
    assert "User:ANONYMOUS" in err and "--force" in err and "super.users" in err, err
    code, out, err = tidelog(cluster, "acls", "list", "--cluster")
    assert code == 0 and "User:admin" not in out, out + err
    # Allowing the caller too keeps it in: no refusal.
    code, _, err = tidelog(cluster, "acls", "add", "--cluster", "--allow-principal",
                           "User:admin", "--allow-principal", "User:ANONYMOUS")
    assert code == 0, err
    # Removing the caller's own grant while User:admin's stays would shut it out as well.
    code, _, err = tidelog(cluster, "acls", "remove", "--cluster", "--allow-principal",
                           "User:ANONYMOUS")
    assert code == 2 and "--force" in err and "super.users" in err, err
    # With no ACL left, the nodes' allow.everyone.if.no.acl.found decides: a warning.
    code, out, err = tidelog(cluster, "acls", "remove", "--cluster")
    assert code == 0 and out.count("removed") == 2, out + err
    assert "allow.everyone.if.no.acl.found" in err, err
