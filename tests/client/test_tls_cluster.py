"""TLS on both listeners of real node processes (``LocalCluster(tls=True)``): clients that may
not connect are told why, a node whose certificate the cluster's CA did not sign replicates
nothing and the logs say why, and the main scenario (lookups, sends and polls across leader
kills) runs unchanged with TLS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_client_cluster as plaintext_suite
from record_helpers import values_of

from tidelog import Client, OffsetSpec, TopicPartition, cli
from tidelog.acl import (
    AccessControlEntry,
    AclBinding,
    Operation,
    Permission,
    ResourcePattern,
    ResourceType,
)
from tidelog.certificates import CertificateAuthority
from tidelog.errors import SslAuthenticationError, TopicAuthorizationFailedError
from tidelog.testing import LocalCluster, Raw, wait_for

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"tls": True}


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap, **cluster.client_options) as c:
        yield c


def _refusal(**options: Any) -> str:
    """The error message of a client built with `options` asking a TLS cluster anything."""
    with pytest.raises(SslAuthenticationError) as refused, Client(**options) as stranger:
        stranger.admin.list_topics()
    return str(refused.value)


def test_a_plaintext_client_is_told_that_the_listener_requires_tls(cluster: LocalCluster) -> None:
    message = _refusal(bootstrap=cluster.bootstrap, request_timeout_ms=10_000)
    assert "requires TLS" in message and "security_protocol='SSL'" in message, message


def test_a_client_certificate_of_another_ca_is_refused(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    stranger = CertificateAuthority(tmp_path).issue("mallory", "mallory")
    options = {**cluster.client_options, "ssl_certfile": str(stranger.certfile),
               "ssl_keyfile": str(stranger.keyfile)}
    message = _refusal(bootstrap=cluster.bootstrap, request_timeout_ms=10_000, **options)
    assert "refused the certificate" in message, message


def test_a_client_without_a_certificate_is_refused(cluster: LocalCluster) -> None:
    options = {k: v for k, v in cluster.client_options.items() if k == "ssl_cafile"}
    message = _refusal(bootstrap=cluster.bootstrap, request_timeout_ms=10_000,
                       security_protocol="SSL", **options)
    assert "requires a client certificate" in message, message


def test_a_client_that_does_not_trust_the_nodes_ca_says_so(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    other_ca = CertificateAuthority(tmp_path)
    options = {**cluster.client_options, "ssl_cafile": str(other_ca.cafile)}
    message = _refusal(bootstrap=cluster.bootstrap, request_timeout_ms=10_000, **options)
    assert "not trusted by ssl_cafile" in message, message


def test_the_cli_takes_tls_flags_or_a_command_config(
    cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = cluster.client_options
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in options.items()]
    properties = tmp_path / "client.properties"
    properties.write_text("".join(f"{k.replace('_', '.', 1)}={v}\n" for k, v in options.items()))
    bootstrap = f"--bootstrap={cluster.bootstrap}"
    assert cli.main(["topic", "create", "cli-tls", bootstrap, *flags]) == 0
    assert cli.main(["topic", "list", bootstrap, f"--command-config={properties}"]) == 0
    assert "cli-tls" in capsys.readouterr().out
    assert cli.main(["topic", "list", bootstrap, "--timeout-ms=10000"]) == 2
    assert "requires TLS" in capsys.readouterr().err


def test_a_principal_without_acls_may_not_delete_a_topic_another_owns(
    cluster: LocalCluster, client: Client
) -> None:
    """With the authorizer on, what no ACL allows is denied (allow.everyone.if.no.acl.found
    unset is false): bob, who has no ACL, may not delete a topic whose ACL names alice, neither
    through DELETE on the cluster (which no ACL mentions) nor on the topic. Were a resource no
    ACL mentions open to all, bob would hold DELETE on the cluster and the topic would go."""
    client.create_topic("alice-owns", partitions=1, replication_factor=3)
    client.admin.create_acls([AclBinding(
        ResourcePattern(ResourceType.TOPIC, "alice-owns"),
        AccessControlEntry("User:CN=alice", Operation.ALL, Permission.ALLOW),
    )])
    with Client(cluster.bootstrap, **cluster.client_options_as("bob")) as bob, \
            pytest.raises(TopicAuthorizationFailedError,
                          match="User:CN=bob is not authorized to DELETE topic 'alice-owns'"):
        bob.admin.delete_topic("alice-owns", timeout_ms=30_000)
    assert "alice-owns" in client.admin.list_topics()


def test_the_main_scenario_runs_with_tls(client: Client, cluster: LocalCluster) -> None:
    plaintext_suite.test_leader_kills_during_lookups_sends_and_polls_reach_no_caller(
        client, cluster
    )


def test_a_node_whose_certificate_the_ca_did_not_sign_replicates_nothing(
    tmp_path: Path,
) -> None:
    with LocalCluster(3, tls=True, auto_leader_rebalance_enable=False) as cluster, \
            Raw(cluster) as raw, Client(cluster.bootstrap, **cluster.client_options) as client:
        client.create_topic("guarded", partitions=1, replication_factor=3)
        raw.wait_leaders("guarded", 1)
        cluster.stop(3)
        # Node 3 comes back with a certificate of another CA, under the names its config uses.
        impostor = CertificateAuthority(tmp_path).issue("node-3", "node-3", node=True)
        own_cert, own_key = cluster.tls_dir / "node-3.pem", cluster.tls_dir / "node-3-key.pem"
        kept = own_cert.read_bytes(), own_key.read_bytes()
        own_cert.write_bytes(impostor.certfile.read_bytes())
        own_key.write_bytes(impostor.keyfile.read_bytes())
        tp = TopicPartition("guarded", 0)
        producer = client.producer()
        for i in range(20):
            producer.send(tp.topic, b"%d" % i, partition=0)
        producer.flush()
        producer.close()
        assert client.list_offsets({tp: OffsetSpec.latest()})[tp].offset == 20
        cluster.restart(3, wait=False)  # it cannot be probed: the harness trusts the CA only

        def logged_why() -> bool:
            return all("not trusted by ssl_cafile" in cluster.logs(n) for n in (1, 2)) and (
                "refused the certificate" in cluster.logs(3)
            )

        wait_for(logged_why, 60, "the nodes to log why node 3's links fail")
        assert cluster.is_running(3)
        # Nothing of the partition reached node 3 (its harness port is closed to us too).
        segments = (cluster.data_dir / "node-3" / "guarded-0").glob("*.log")
        assert sum(segment.stat().st_size for segment in segments) == 0

        # With its own certificate back, the same node catches up: the certificate was the
        # reason. Killed, not stopped: cut off from the metadata voters, it is still waiting
        # (10 s) for one to catch up from, and a SIGTERM waits for that.
        cluster.kill(3)
        own_cert.write_bytes(kept[0])
        own_key.write_bytes(kept[1])
        cluster.restart(3)
        wait_for(
            lambda: len(values_of(raw.fetch_all(3, "guarded", 0, replica_id=-2))) == 20,
            60, "node 3 to replicate the partition",
        )
