"""A node's configuration: identity, addresses, and Kafka-named tunables.

Every setting has a Kafka-style key (``segment.bytes``, ``election.timeout.ms``...) so the same
names work in a properties file, in ``--set key=value`` and in topic configs. A properties
file, command-line flags and ``LocalCluster(**node_config)`` all end in
:meth:`NodeConfig.from_properties`, so validation and defaults live in one place.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tidelog.coordinator.controller import MAX_PARTITIONS
from tidelog.coordinator.metadata_records import split_address
from tidelog.errors import InvalidConfigError
from tidelog.event_loops import KINDS as EVENT_LOOP_KINDS
from tidelog.event_loops import EventLoopKind
from tidelog.properties import read_properties
from tidelog.records import MAX_MESSAGE_BYTES

FlushPolicy = Literal["always", "never"]
SecurityProtocol = Literal["PLAINTEXT", "SSL"]
KafkaSecurityProtocol = Literal["", "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
#: The SASL mechanisms the Kafka listener can offer (node/kafka/sasl.py).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
ClientAuth = Literal["none", "required"]
LogFormat = Literal["text", "json"]
AuthorizerKind = Literal["none", "acl"]

#: Kafka-style key -> NodeConfig field, for every setting a node understands itself. Keys not in
#: this table are topic defaults and go to ``NodeConfig.extra``.
KEYS: dict[str, str] = {
    "node.id": "node_id",
    "listen": "listen",
    "advertised.address": "advertised",
    "data.dir": "data_dir",
    "peers": "peers",
    "client.addresses": "client_addresses",
    "controller.quorum.bootstrap.servers": "join",
    "broker.heartbeat.interval.ms": "broker_heartbeat_interval_ms",
    "broker.session.timeout.ms": "broker_session_timeout_ms",
    "segment.bytes": "segment_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "segment.ms": "segment_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "num.partitions": "num_partitions",
    "default.replication.factor": "default_replication_factor",
    "election.timeout.ms": "election_timeout_ms",
    "heartbeat.interval.ms": "heartbeat_interval_ms",
    "raft.tick.ms": "raft_tick_ms",
    "log.flush.policy": "log_flush_policy",
    "log.scrub.bytes.per.second": "log_scrub_bytes_per_second",
    "log.scrub.interval.ms": "log_scrub_interval_ms",
    "replica.lag.max.ms": "replica_lag_max_ms",
    "auto.leader.rebalance.enable": "auto_leader_rebalance_enable",
    "leader.imbalance.check.interval.ms": "leader_imbalance_check_interval_ms",
    "log.retention.check.interval.ms": "log_retention_check_interval_ms",
    "partition.autobalancing.enable": "partition_autobalancing_enable",
    "partition.autobalancing.max.moves": "partition_autobalancing_max_moves",
    "partition.autobalancing.tick.interval.ms": "partition_autobalancing_tick_interval_ms",
    "balancer.operator.hold.ms": "balancer_operator_hold_ms",
    "replica.high.watermark.checkpoint.interval.ms":
        "replica_high_watermark_checkpoint_interval_ms",
    "offsets.topic.num.partitions": "offsets_topic_num_partitions",
    "offsets.topic.replication.factor": "offsets_topic_replication_factor",
    "offsets.retention.minutes": "offsets_retention_minutes",
    "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
    "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    "offsets.commit.timeout.ms": "offsets_commit_timeout_ms",
    "group.consumer.session.timeout.ms": "group_consumer_session_timeout_ms",
    "group.consumer.heartbeat.interval.ms": "group_consumer_heartbeat_interval_ms",
    "group.consumer.max.size": "group_consumer_max_size",
    "group.consumer.assignors": "group_consumer_assignors",
    "transaction.state.log.num.partitions": "transaction_state_log_num_partitions",
    "transaction.state.log.replication.factor": "transaction_state_log_replication_factor",
    "transaction.max.timeout.ms": "transaction_max_timeout_ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms":
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
    "transactional.id.expiration.ms": "transactional_id_expiration_ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms":
        "transaction_remove_expired_transaction_cleanup_interval_ms",
    "transaction.partition.verification.enable": "transaction_partition_verification_enable",
    # observability (metrics, logs)
    "metrics.port": "metrics_port",
    "metrics.host": "metrics_host",
    "metrics.auth.token.file": "metrics_auth_token_file",
    "metrics.topic.labels": "metrics_topic_labels",
    "queued.max.request.bytes": "queued_max_request_bytes",
    "log.format": "log_format",
    "event.loop": "event_loop",
    "test.drop.produce.response.rate": "test_drop_produce_response_rate",
    "test.ack.before.commit": "test_ack_before_commit",
    "test.offsets.ack.before.commit": "test_offsets_ack_before_commit",
    "test.groups.grant.before.revoke": "test_groups_grant_before_revoke",
    "test.txn.markers.delay.ms": "test_txn_markers_delay_ms",
    "test.txn.markers.before.prepare": "test_txn_markers_before_prepare",
    "test.seed": "test_seed",
    # Listeners and TLS (issue 17)
    "internal.listen": "internal_listen",
    "security.protocol": "security_protocol",
    "security.inter.broker.protocol": "security_inter_broker_protocol",
    "ssl.certfile": "ssl_certfile",
    "ssl.keyfile": "ssl_keyfile",
    "ssl.cafile": "ssl_cafile",
    "ssl.client.auth": "ssl_client_auth",
    "internal.ssl.cafile": "internal_ssl_cafile",
    "node.principals": "node_principals",
    # The Kafka listener (issue 30)
    "kafka.listen": "kafka_listen",
    "kafka.advertised.address": "kafka_advertised",
    "kafka.security.protocol": "kafka_security_protocol",
    "sasl.enabled.mechanisms": "sasl_enabled_mechanisms",
    "connections.max.idle.ms": "connections_max_idle_ms",
    "auto.create.topics.enable": "auto_create_topics_enable",
    # ACLs (acls)
    "authorizer": "authorizer",
    "super.users": "super_users",
    "allow.everyone.if.no.acl.found": "allow_everyone_if_no_acl_found",
}
_FIELD_TO_KEY = {name: key for key, name in KEYS.items()}
#: The node settings (beyond the topic defaults) that IncrementalAlterConfigs may change while
#: the nodes run, as dynamic node configs: every node's default, or one node's own.
DYNAMIC_KEYS = frozenset({"partition.autobalancing.enable", "partition.autobalancing.max.moves",
                          "balancer.operator.hold.ms"})
_REQUIRED = ("listen", "data.dir")
_KEY_PATTERN = re.compile(r"[a-z0-9]+([._-][a-z0-9]+)*")
_WEEK_MS = 7 * 24 * 3600 * 1000
#: Kafka's INT settings end here.
_MAX_INT = 2**31 - 1


@dataclass(frozen=True)
class NodeConfig:
    """One node's settings. Defaults follow Kafka where Kafka has the setting."""

    #: -1 only with `join` (node.id unset): the controller assigns one when the node joins.
    node_id: int
    #: "host:port" of the client listener (the Tidelog service, health, reflection): any
    #: address of this host, a wildcard (0.0.0.0, ::) with advertised.address set, port 0 for
    #: any free port. A non-loopback listener without TLS is warned about at start.
    listen: str
    #: The directory of this node's partitions, checkpoints and metadata log (kept 0700).
    data_dir: Path
    #: node_id -> node-to-node address of every node, this one included (its own entry is
    #: added from the bound internal listener when omitted, so a single node needs no peers).
    peers: Mapping[int, str] = field(default_factory=dict)
    #: The client address published for this node; empty means "the bound listen address".
    advertised: str = ""
    #: Node-to-node addresses ("host:port,...") of running nodes to join through (Kafka's
    #: controller.quorum.bootstrap.servers): the node registers with the controller there
    #: (`tidelog node --join`) instead of being listed in a static peers list, and learns the
    #: controller's voters and the other nodes from the answer and the metadata it pulls.
    join: str = ""
    #: The voters of the controller's Raft group when they are not the first min(3, N) peers:
    #: set by joining, from the controller's answer (no key of its own).
    controller_voters: tuple[int, ...] = ()
    #: Node liveness as the controller sees it (Kafka's names): each node heartbeats the
    #: controller leader every interval, and one silent for the session timeout is fenced
    #: (no new replicas, left out of Metadata) until it heartbeats again. Kafka's session
    #: timeout; its interval is 2 s, halved here so that one lost heartbeat matters less.
    broker_heartbeat_interval_ms: int = 1000
    broker_session_timeout_ms: int = 9000
    #: Topic default (for topics created without an override): a segment rolls once it
    #: would grow past this many bytes.
    segment_bytes: int = 1024 * 1024 * 1024
    #: Topic default: a segment adds an offset and a time index entry every this many bytes.
    index_interval_bytes: int = 4096
    #: Topic default: a segment rolls once its records' timestamps span this long.
    segment_ms: int = _WEEK_MS
    #: -1 keeps data forever, as in Kafka.
    retention_ms: int = _WEEK_MS
    #: The size a partition's log is cut back to by deleting its oldest segments; -1: no limit.
    retention_bytes: int = -1
    #: What CreateTopics uses for a topic that leaves its partition count or replication
    #: factor unset (or -1), as Kafka's settings of these names (both default to 1 there too).
    num_partitions: int = 1
    default_replication_factor: int = 1
    #: The minimum election timeout; each election draws from [min, 2 * min).
    election_timeout_ms: int = 300
    #: How often a Raft leader heartbeats its followers (a multiple of raft.tick.ms).
    heartbeat_interval_ms: int = 50
    #: The Raft clock: every timer of the partitions' Raft groups counts these ticks.
    raft_tick_ms: int = 10
    #: "always" fsyncs before acknowledging (the durability contract of contract §7); "never" leaves
    #: flushing to the OS and exists for benchmarks only.
    log_flush_policy: FlushPolicy = "always"
    #: How fast the scrubber re-reads segments to verify their CRCs (node/replicas/scrubber.py);
    #: 0 turns it off.
    log_scrub_bytes_per_second: int = 8 * 1024 * 1024
    #: Each log's segments are verified once per interval (HDFS's scan period).
    log_scrub_interval_ms: int = 24 * 3600 * 1000
    #: A follower that has not caught up with the leader for this long leaves the ISR.
    replica_lag_max_ms: int = 30_000
    #: Hand leadership back to each partition's preferred replica once it is in sync (Kafka's
    #: auto leader rebalance), checked every leader.imbalance.check.interval.ms (Kafka checks
    #: every 5 minutes; a laptop cluster settles faster).
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 1000
    #: How often retention (and the cleaner of compacted topics) runs over every log. Kafka's
    #: default is 5 minutes; a laptop cluster's tests want retention seen within seconds.
    log_retention_check_interval_ms: int = 5000
    #: Continuous partition balancing (Redpanda's): the controller leader moves replicas so
    #: that every node holds about as many, and leads about as many, as the others (a node
    #: that joined gets its share), at most max.moves partitions moving at a time. Off, it
    #: still drains nodes being decommissioned. Both dynamic (DYNAMIC_KEYS).
    partition_autobalancing_enable: bool = True
    partition_autobalancing_max_moves: int = 2
    #: How often the controller leader looks for moves to make (Redpanda ticks every 30 s;
    #: moves take seconds on a laptop cluster, and a balanced cluster's plan is one pass).
    partition_autobalancing_tick_interval_ms: int = 500
    #: How long balancing leaves a partition alone after an operator reassigned it (or
    #: cancelled its reassignment), counted from the request or from the move's completion,
    #: whichever is later; `tidelog reassign --release` ends it sooner, 0 lets the balancer
    #: move such partitions at once. One hour: longer than an operator takes to verify a plan
    #: and finish the maintenance it was made for, short enough that a forgotten plan does
    #: not keep the cluster uneven for good (a node that joins later still gets its share
    #: once it ends). Dynamic (DYNAMIC_KEYS).
    balancer_operator_hold_ms: int = 3_600_000
    #: How often each changed log is flushed and its offsets (recovery point, high watermark)
    #: checkpointed, which bounds what crash recovery re-reads (Kafka's 5 s).
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    #: The internal topic of committed consumer offsets (`__consumer_offsets`), created on the
    #: first FindCoordinator with this many partitions and min(this factor, nodes) replicas;
    #: Kafka's defaults. Once it exists, its own partition count places groups.
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    #: The internal topic of transactions (`__transaction_state`), created on the first
    #: FindCoordinator of a transactional id, as the offsets topic; Kafka's defaults.
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    #: The longest transaction.timeout.ms a producer may ask for (Kafka's 15 minutes); larger
    #: is INVALID_TRANSACTION_TIMEOUT (50).
    transaction_max_timeout_ms: int = 900_000
    #: How often the coordinator looks for transactions past their timeout, aborts them and
    #: fences their producers (Kafka's 10 s).
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    #: A transactional id with no transaction for this long (Kafka's 7 days) is removed: its
    #: record gets a tombstone. Looked for every ...cleanup.interval.ms (Kafka's hour).
    transactional_id_expiration_ms: int = 7 * 24 * 3_600_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    #: A partition leader appends a client's transactional batch that would open a transaction
    #: on the partition only once the producer's transaction coordinator says the partition
    #: was added to that producer's ongoing transaction (Kafka's KIP-890 part 1, on by
    #: default): otherwise a stray or late batch would open a transaction no marker ends, and
    #: the partition's last stable offset would stop there for good. Off, such batches are
    #: appended unchecked (tests that write transactional batches without a coordinator).
    transaction_partition_verification_enable: bool = True
    #: A group's offsets expire this long after its newest commit (Kafka's 7 days), checked
    #: every offsets.retention.check.interval.ms (Kafka's 10 minutes). Kafka takes whole
    #: minutes; a fraction is accepted too (0.1 is 6 s), so a test of expiration need not
    #: wait a minute.
    offsets_retention_minutes: float = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    #: The longest committed metadata, in Java characters (UTF-16 code units), as Kafka counts.
    offset_metadata_max_bytes: int = 4096
    #: How long an OffsetCommit waits for its records to commit before it fails
    #: (COORDINATOR_NOT_AVAILABLE, as Kafka maps the timeout).
    offsets_commit_timeout_ms: int = 5000
    #: Consumer groups (KIP-848), Kafka's defaults: a member that sends no heartbeat for the
    #: session timeout is fenced; members heartbeat at the interval; at most max.size members;
    #: the server-side assignors a group may ask for, the first the default. Kafka bounds the
    #: timeouts to 45-60 s and 5-15 s; Tidelog lets a test cluster go lower.
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_max_size: int = 0x7FFF_FFFF
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    #: Observability. The port of the Prometheus endpoint (/metrics), on the listen address's
    #: host; 0 picks a free port (written to metrics.addr in the data dir), -1 serves none.
    metrics_port: int = -1
    #: The host the metrics endpoint binds: loopback unless set. Another address needs
    #: metrics.auth.token.file: with it the endpoint speaks HTTPS with the node's ssl.certfile
    #: and ssl.keyfile and answers only a scraper that sends that bearer token.
    metrics_host: str = "127.0.0.1"
    metrics_auth_token_file: str = ""
    #: Whether the state metrics name each topic and partition. Off, they are summed per node
    #: (the per-partition families are left out), so the endpoint names no topic.
    metrics_topic_labels: bool = True
    #: The most bytes of requests each listener holds at once, being received or waiting for
    #: their answer (Kafka's queued.max.request.bytes); one connection holds at most a quarter
    #: of it. Past it, reading further requests waits (node/edge/limits.py). At least one maximal
    #: Produce request.
    queued_max_request_bytes: int = 512 * 1024 * 1024
    #: "text" lines for people, or "json": one JSON object per line for log pipelines.
    log_format: LogFormat = "text"
    #: The event loop the node runs on (tidelog/event_loops.py): "auto" is uvloop where it is
    #: installed (less CPU per request), else asyncio's; "asyncio" or "uvloop" to choose.
    event_loop: EventLoopKind = "auto"
    #: Tests only: the share of Produce answers dropped (UNAVAILABLE) after the write
    #: committed, to prove that idempotent retries write nothing twice.
    test_drop_produce_response_rate: float = 0.0
    #: Tests only: the seed of the node's test hooks' generator (with the node id), so that a
    #: run that drops Produce answers replays the same drops.
    test_seed: int = 0
    #: Tests only, a planted bug: acks=all is acknowledged once the leader wrote the batch
    #: (as acks=1), not once it committed, so the chaos checker can show it catches data loss.
    test_ack_before_commit: bool = False
    #: Tests only, a planted bug: an OffsetCommit is answered once its records are appended
    #: on the coordinator, not once they committed, so the chaos checker can show it catches
    #: stale and lost commits.
    test_offsets_ack_before_commit: bool = False
    #: Tests only, a planted bug: a consumer group hands a partition to its new owner before
    #: the previous owner revoked it, so the chaos checker can show it catches double
    #: ownership.
    test_groups_grant_before_revoke: bool = False
    #: Tests only: the transaction coordinator waits this long after a transaction is prepared
    #: before it writes its markers, so that a test can kill it between PrepareCommit and
    #: CompleteCommit.
    test_txn_markers_delay_ms: int = 0
    #: Tests only, a planted bug: on EndTxn the transaction coordinator writes the markers
    #: first and appends PrepareCommit/PrepareAbort after them, so that a coordinator lost
    #: before its Prepare commits leaves a decision on the partitions that the next coordinator
    #: does not know of; the chaos checker shows it catches that.
    test_txn_markers_before_prepare: bool = False
    #: node_id -> the client address of every other node, published in Metadata and leader
    #: hints and used to forward requests (this node's own is its advertised address).
    client_addresses: Mapping[int, str] = field(default_factory=dict)
    # ---- Listeners and TLS (issue 17) ----
    #: "host:port" of the node-to-node listener (Raft streams, metadata pulls), never served on
    #: the client port. Empty: this node's own entry in `peers`, else listen's host, any port.
    internal_listen: str = ""
    #: PLAINTEXT or SSL on the client listener, and on the node-to-node one (Kafka's
    #: security.inter.broker.protocol; SSL there is always mutual: each node presents
    #: ssl.certfile and verifies its peers' certificates against ssl.cafile).
    security_protocol: SecurityProtocol = "PLAINTEXT"
    security_inter_broker_protocol: SecurityProtocol = "PLAINTEXT"
    #: PEM files: this node's certificate (chain) and key, and the CA certificates it trusts.
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    ssl_cafile: str = ""
    #: "required": a client of the SSL client listener must present a certificate that
    #: ssl.cafile verifies (mutual TLS; its subject becomes the principal); "none": it need not.
    ssl_client_auth: ClientAuth = "none"
    #: The CA certificates the node-to-node listener verifies its peers' certificates with, and
    #: this node verifies the peers it dials with; empty: ssl.cafile. Node certificates may come
    #: from a CA of their own, so that no client certificate is even a candidate node.
    internal_ssl_cafile: str = ""
    #: Who counts as a node (``;``-separated principals, as super.users): on an SSL node-to-node
    #: listener every call from another principal is refused (PERMISSION_DENIED), and only these
    #: may forward a request on behalf of a client (node/api/forwarding.py). Empty: super.users.
    #: A PLAINTEXT node-to-node listener knows no identity and checks nothing.
    node_principals: tuple[str, ...] = ()
    #: "host:port" of the Kafka listener (Kafka's wire protocol, node/kafka/), beside the gRPC
    #: ones: port 0 for any free port, empty for none. It has the client listener's TLS
    #: (security.protocol, the same certificate, key, CA and ssl.client.auth), principals,
    #: ACLs and queued.max.request.bytes.
    kafka_listen: str = ""
    #: The Kafka address published for this node (Metadata's brokers); empty means "the bound
    #: kafka.listen address".
    kafka_advertised: str = ""
    #: The Kafka listener's security protocol, by Kafka's names (its entry of Kafka's
    #: listener.security.protocol.map): PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; empty
    #: means security.protocol's. SSL and SASL_SSL use the client listener's certificate and
    #: key. With SASL a client authenticates with one of sasl.enabled.mechanisms against the
    #: SCRAM credentials of the metadata log (``tidelog configs --entity-type users``, Kafka's
    #: AlterUserScramCredentials) and its principal is ``User:<name>``; a SASL_SSL listener
    #: asks for no client certificate (ssl.client.auth concerns the client listener).
    kafka_security_protocol: KafkaSecurityProtocol = ""
    #: The SASL mechanisms a SASL Kafka listener offers (Kafka's setting; comma-separated):
    #: any of PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512. PLAIN sends the password itself, so it
    #: belongs on SASL_SSL; it is checked against the same SCRAM credentials.
    sasl_enabled_mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512")
    #: A Kafka connection with no request in flight that received nothing for this long is
    #: closed (Kafka's setting of this name), so that a client that connects and stalls, or
    #: stops sending in the middle of a frame, does not hold a connection for ever; -1 never
    #: closes one. The gRPC listeners are not concerned.
    connections_max_idle_ms: int = 600_000
    #: A Kafka client's Metadata request naming a topic that does not exist creates it, with
    #: num.partitions and default.replication.factor, when the request allows it (Kafka's
    #: setting of this name): CREATE on the cluster or the topic is checked as for
    #: CreateTopics. Kafka's default is true; Tidelog's is false, so that a topic exists only
    #: when someone created it (a misspelt name in a client creates nothing).
    auto_create_topics_enable: bool = False
    # ---- ACLs (acls) ----
    #: "none": no authorizer, every request of every principal is allowed (Kafka without
    #: ``authorizer.class.name``); ACL records already in the metadata log stay stored but
    #: decide nothing, and CreateAcls, DescribeAcls and DeleteAcls answer SECURITY_DISABLED
    #: (54). "acl": every request is decided by the ACLs, `super_users` and
    #: `allow_everyone_if_no_acl_found`. `tidelog cluster up --tls` and
    #: ``LocalCluster(tls=True)`` turn it on; a plaintext local cluster keeps it off.
    authorizer: AuthorizerKind = "none"
    #: Principals allowed everything whatever the ACLs say (Kafka's ``super.users``,
    #: ``;``-separated in a properties file): the nodes' own principals belong here once
    #: clients authenticate, so that requests they forward keep their client's principal.
    super_users: tuple[str, ...] = ()
    #: Whether a resource no ACL mentions is open to everyone. Unset (None) it is false, as in
    #: Kafka, so that turning the authorizer on denies by default; it matters only with
    #: ``authorizer=acl``.
    allow_everyone_if_no_acl_found: bool | None = None
    #: Topic defaults (Kafka topic-config names), applied to topics created without an override.
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require(
            self.node_id >= 0 or (self.node_id == -1 and bool(self.join)),
            f"node.id must be >= 0, got {self.node_id}" if self.node_id != -1 else
            "node.id is required, unless the node joins a running cluster "
            "(controller.quorum.bootstrap.servers, tidelog node --join) and gets one there",
        )
        for address in self.join_addresses:
            _parse_address("controller.quorum.bootstrap.servers", address)
        _require(
            not (self.join and set(self.peers) - {self.node_id}),
            "a joining node (controller.quorum.bootstrap.servers) has no peers list: it learns "
            "the other nodes from the controller",
        )
        _require(
            1 <= self.broker_heartbeat_interval_ms < self.broker_session_timeout_ms,
            "broker.heartbeat.interval.ms must be >= 1 and below broker.session.timeout.ms",
        )
        object.__setattr__(self, "controller_voters", tuple(self.controller_voters))
        listen_host = _parse_address("listen", self.listen)[0]
        if self.advertised:
            _require(
                not _is_wildcard(_parse_address("advertised.address", self.advertised)[0]),
                f"advertised.address {self.advertised} is a wildcard: clients need an address "
                "to dial",
            )
        else:
            _require(
                not _is_wildcard(listen_host),
                f"listen {self.listen} is a wildcard address: set advertised.address to the "
                "address clients dial",
            )
        for peer_id, address in self.peers.items():
            _require(peer_id >= 0, f"peers: node id must be >= 0, got {peer_id}")
            _parse_address(f"peers: address of node {peer_id}", address)
        _require(self.segment_bytes >= 14, "segment.bytes must be >= 14 (Kafka's minimum)")
        _require(self.index_interval_bytes >= 0, "index.interval.bytes must be >= 0")
        _require(self.segment_ms >= 1, "segment.ms must be >= 1")
        _require(self.retention_ms >= -1, "retention.ms must be >= -1 (-1: keep forever)")
        _require(self.retention_bytes >= -1, "retention.bytes must be >= -1 (-1: no limit)")
        _require(self.num_partitions >= 1, "num.partitions must be >= 1")
        _require(self.default_replication_factor >= 1, "default.replication.factor must be >= 1")
        _require(self.raft_tick_ms >= 1, "raft.tick.ms must be >= 1")
        _require(
            self.heartbeat_interval_ms >= self.raft_tick_ms,
            f"heartbeat.interval.ms ({self.heartbeat_interval_ms}) must be >= raft.tick.ms "
            f"({self.raft_tick_ms}): heartbeats are sent on ticks",
        )
        _require(
            self.election_timeout_ms > self.heartbeat_interval_ms,
            f"election.timeout.ms ({self.election_timeout_ms}) must be > heartbeat.interval.ms "
            f"({self.heartbeat_interval_ms}), or followers time out between heartbeats",
        )
        _require(
            self.log_flush_policy in ("always", "never"),
            f"log.flush.policy must be 'always' or 'never', got {self.log_flush_policy!r}",
        )
        _require(
            -1 <= self.metrics_port <= 65535,
            f"metrics.port must be a port, 0 (any free one) or -1 (off), got {self.metrics_port}",
        )
        _require(
            self.metrics_port < 0 or _is_loopback(self.metrics_host)
            or bool(self.metrics_auth_token_file),
            f"metrics.host {self.metrics_host} is not a loopback address: an endpoint other "
            "hosts reach needs a scrape credential (metrics.auth.token.file) and TLS "
            "(ssl.certfile, ssl.keyfile)",
        )
        _require(
            not self.metrics_auth_token_file or bool(self.ssl_certfile and self.ssl_keyfile),
            "metrics.auth.token.file needs ssl.certfile and ssl.keyfile: the endpoint then "
            "speaks HTTPS, so that the token never travels in the clear",
        )
        _require(
            self.queued_max_request_bytes >= MAX_MESSAGE_BYTES,
            f"queued.max.request.bytes must be at least {MAX_MESSAGE_BYTES} (one maximal "
            f"Produce request), got {self.queued_max_request_bytes}",
        )
        _require(
            self.connections_max_idle_ms >= 1 or self.connections_max_idle_ms == -1,
            "connections.max.idle.ms must be >= 1, or -1 to never close an idle connection, "
            f"got {self.connections_max_idle_ms}",
        )
        _require(
            self.log_format in ("text", "json"),
            f"log.format must be 'text' or 'json', got {self.log_format!r}",
        )
        _require(
            self.event_loop in EVENT_LOOP_KINDS,
            f"event.loop must be one of {', '.join(EVENT_LOOP_KINDS)}, got {self.event_loop!r}",
        )
        _require(self.replica_lag_max_ms >= 1, "replica.lag.max.ms must be >= 1")
        _require(
            self.log_scrub_bytes_per_second >= 0,
            "log.scrub.bytes.per.second must be >= 0 (0: no scrub)",
        )
        _require(self.log_scrub_interval_ms >= 1, "log.scrub.interval.ms must be >= 1")
        _require(
            self.leader_imbalance_check_interval_ms >= 1,
            "leader.imbalance.check.interval.ms must be >= 1",
        )
        _require(self.log_retention_check_interval_ms >= 1,
                 "log.retention.check.interval.ms must be >= 1")
        _require(self.partition_autobalancing_max_moves >= 1,
                 "partition.autobalancing.max.moves must be >= 1")
        _require(self.partition_autobalancing_tick_interval_ms >= 1,
                 "partition.autobalancing.tick.interval.ms must be >= 1")
        _require(self.balancer_operator_hold_ms >= 0,
                 "balancer.operator.hold.ms must be >= 0 (0: no hold)")
        _require(self.replica_high_watermark_checkpoint_interval_ms >= 1,
                 "replica.high.watermark.checkpoint.interval.ms must be >= 1")
        _require(
            1 <= self.offsets_topic_num_partitions <= MAX_PARTITIONS,
            f"offsets.topic.num.partitions must be between 1 and {MAX_PARTITIONS}",
        )
        _require(
            self.offsets_topic_replication_factor >= 1,
            "offsets.topic.replication.factor must be >= 1",
        )
        _require(
            0 < self.offsets_retention_minutes <= _MAX_INT,
            f"offsets.retention.minutes must be > 0 and <= {_MAX_INT}",
        )
        _require(
            self.offsets_retention_check_interval_ms >= 1,
            "offsets.retention.check.interval.ms must be >= 1",
        )
        _require(self.offset_metadata_max_bytes >= 0, "offset.metadata.max.bytes must be >= 0")
        _require(self.offsets_commit_timeout_ms >= 1, "offsets.commit.timeout.ms must be >= 1")
        _require(
            1 <= self.group_consumer_heartbeat_interval_ms < self.group_consumer_session_timeout_ms,
            "group.consumer.heartbeat.interval.ms must be >= 1 and below "
            "group.consumer.session.timeout.ms",
        )
        _require(self.group_consumer_max_size >= 1, "group.consumer.max.size must be >= 1")
        object.__setattr__(self, "group_consumer_assignors", tuple(self.group_consumer_assignors))
        _require(
            bool(self.group_consumer_assignors)
            and set(self.group_consumer_assignors) <= {"uniform", "range"},
            "group.consumer.assignors must name uniform and/or range",
        )
        _require(
            1 <= self.transaction_state_log_num_partitions <= MAX_PARTITIONS,
            f"transaction.state.log.num.partitions must be between 1 and {MAX_PARTITIONS}",
        )
        _require(
            self.transaction_state_log_replication_factor >= 1,
            "transaction.state.log.replication.factor must be >= 1",
        )
        _require(self.transaction_max_timeout_ms >= 1, "transaction.max.timeout.ms must be >= 1")
        _require(
            self.transaction_abort_timed_out_transaction_cleanup_interval_ms >= 1,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms must be >= 1",
        )
        _require(
            self.transactional_id_expiration_ms >= 1,
            "transactional.id.expiration.ms must be >= 1",
        )
        _require(
            self.transaction_remove_expired_transaction_cleanup_interval_ms >= 1,
            "transaction.remove.expired.transaction.cleanup.interval.ms must be >= 1",
        )
        _require(
            0.0 <= self.test_drop_produce_response_rate <= 1.0,
            "test.drop.produce.response.rate must be within 0..1",
        )
        _require(
            self.authorizer in ("none", "acl"),
            f"authorizer must be 'none' or 'acl', got {self.authorizer!r}",
        )
        for key, principals in (("super.users", self.super_users),
                                ("node.principals", self.node_principals)):
            for principal in principals:
                kind, sep, name = principal.partition(":")
                _require(bool(sep and kind and name),
                         f"{key}: {principal!r} is not a principal such as User:alice")
        object.__setattr__(self, "super_users", tuple(self.super_users))
        object.__setattr__(self, "node_principals", tuple(self.node_principals))
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        for node, address in self.client_addresses.items():
            _parse_address(f"client.addresses: address of node {node}", address)
        self._check_listeners()
        object.__setattr__(self, "peers", dict(self.peers))
        object.__setattr__(self, "client_addresses", dict(self.client_addresses))
        object.__setattr__(self, "extra", dict(self.extra))

    def _check_listeners(self) -> None:
        """Resolves internal.listen, and refuses listener and TLS settings that cannot work."""
        own = self.peers.get(self.node_id)
        if not self.internal_listen:
            host = _parse_address("listen", self.listen)[0]
            object.__setattr__(self, "internal_listen", own or format_address(host, 0))
        internal = _parse_address("internal.listen", self.internal_listen)
        client = _parse_address("listen", self.listen)
        _require(
            not _is_wildcard(internal[0]) or own is not None,
            f"internal.listen {self.internal_listen} is a wildcard address: list this node's "
            f"node-to-node address in peers ({self.node_id}=HOST:PORT), which the others dial",
        )
        _require(
            internal[1] == 0 or internal != client,
            f"internal.listen and listen are both {self.listen}: the node-to-node listener "
            "needs its own port (peers lists node-to-node addresses, client.addresses the "
            "client ones)",
        )
        missing = sorted(set(self.peers) - set(self.client_addresses) - {self.node_id})
        _require(
            not missing,
            f"client.addresses has no address for node(s) {', '.join(map(str, missing))}: "
            "peers lists node-to-node addresses; clients are told client.addresses",
        )
        for key, value, allowed in (
            ("security.protocol", self.security_protocol, ("PLAINTEXT", "SSL")),
            ("security.inter.broker.protocol", self.security_inter_broker_protocol,
             ("PLAINTEXT", "SSL")),
            ("ssl.client.auth", self.ssl_client_auth, ("none", "required")),
        ):
            _require(value in allowed, f"{key} must be one of {', '.join(allowed)}, got {value!r}")
        uses_ssl = "SSL" in (self.security_protocol, self.security_inter_broker_protocol,
                             self.kafka_protocol.removeprefix("SASL_"))
        _require(
            not uses_ssl or bool(self.ssl_certfile and self.ssl_keyfile),
            "an SSL listener needs ssl.certfile and ssl.keyfile",
        )
        _require(
            self.security_inter_broker_protocol == "PLAINTEXT" or bool(self.internal_cafile),
            "security.inter.broker.protocol=SSL is mutual TLS: it needs ssl.cafile (or "
            "internal.ssl.cafile) to verify the peers' certificates",
        )
        _require(
            self.security_inter_broker_protocol == "PLAINTEXT" or bool(self.node_principal_set),
            "security.inter.broker.protocol=SSL needs node.principals (or super.users): the "
            "principals of the nodes' certificates (User:CN=node-1;User:CN=node-2;...), the "
            "only callers the node-to-node listener answers",
        )
        self._check_kafka_listener(client, internal)
        _require(
            self.ssl_client_auth == "none"
            or (self.security_protocol == "SSL" and bool(self.ssl_cafile)),
            "ssl.client.auth=required needs security.protocol=SSL and ssl.cafile (the CA that "
            "signs client certificates)",
        )

    def _check_kafka_listener(self, client: tuple[str, int], internal: tuple[str, int]) -> None:
        """kafka.listen and kafka.advertised.address as listen and advertised.address are
        checked: an address, a wildcard only with an address to publish, a port of its own."""
        _require(
            self.kafka_security_protocol in ("", "PLAINTEXT", "SSL", "SASL_PLAINTEXT",
                                             "SASL_SSL"),
            "kafka.security.protocol must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, "
            f"got {self.kafka_security_protocol!r}",
        )
        object.__setattr__(self, "sasl_enabled_mechanisms", tuple(self.sasl_enabled_mechanisms))
        unknown = sorted(set(self.sasl_enabled_mechanisms) - set(SASL_MECHANISMS))
        _require(
            bool(self.sasl_enabled_mechanisms) and not unknown,
            f"sasl.enabled.mechanisms must name some of {', '.join(SASL_MECHANISMS)}"
            + (f", not {', '.join(unknown)}" if unknown else ""),
        )
        if not self.kafka_listen:
            _require(
                not self.kafka_advertised and not self.kafka_security_protocol,
                "kafka.advertised.address or kafka.security.protocol is set but kafka.listen "
                "is not: there is no Kafka listener",
            )
            return
        kafka = _parse_address("kafka.listen", self.kafka_listen)
        if self.kafka_advertised:
            advertised = _parse_address("kafka.advertised.address", self.kafka_advertised)
            _require(
                not _is_wildcard(advertised[0]) and advertised[1] != 0,
                f"kafka.advertised.address {self.kafka_advertised} is a wildcard or has port "
                "0: Kafka clients need an address to dial",
            )
        else:
            _require(
                not _is_wildcard(kafka[0]),
                f"kafka.listen {self.kafka_listen} is a wildcard address: set "
                "kafka.advertised.address to the address Kafka clients dial",
            )
        _require(
            kafka[1] == 0 or kafka not in (client, internal),
            f"kafka.listen {self.kafka_listen} is the address of another listener (listen, "
            "internal.listen): the Kafka listener needs its own port",
        )

    @property
    def kafka_protocol(self) -> str:
        """The Kafka listener's security protocol: kafka.security.protocol, else
        security.protocol's."""
        return self.kafka_security_protocol or self.security_protocol

    @property
    def kafka_advertised_address(self) -> str:
        """The Kafka address to publish: the explicit one, else what the Kafka listener is on
        ("" without a Kafka listener)."""
        return self.kafka_advertised or self.kafka_listen

    def kafka_bound(self, port: int) -> NodeConfig:
        """This config once the Kafka listener bound ``port`` (kafka.listen may ask for port 0):
        the node registers the real address."""
        listen = format_address(_parse_address("kafka.listen", self.kafka_listen)[0], port)
        return dataclasses.replace(
            self, kafka_listen=listen, kafka_advertised=self.kafka_advertised or listen
        )

    @property
    def node_principal_set(self) -> frozenset[str]:
        """The principals that count as nodes: node.principals, else super.users."""
        return frozenset(self.node_principals or self.super_users)

    @property
    def internal_cafile(self) -> str:
        """The CA file node-to-node TLS verifies peers with: internal.ssl.cafile, else
        ssl.cafile."""
        return self.internal_ssl_cafile or self.ssl_cafile

    @property
    def join_addresses(self) -> list[str]:
        """The node-to-node addresses a joining node registers through."""
        return [part.strip() for part in self.join.split(",") if part.strip()]

    @property
    def election_timeout_max_ms(self) -> int:
        """Randomized timeouts are drawn below this bound (2x the minimum, as etcd does)."""
        return 2 * self.election_timeout_ms

    def client_address_of(self, node_id: int) -> str:
        """Where a client reaches `node_id` ("" for a node this one does not know)."""
        if node_id == self.node_id and node_id not in self.client_addresses:
            return self.advertised_address
        return self.client_addresses.get(node_id, "")

    @property
    def listen_host(self) -> str:
        """The host of the listen address: the metrics endpoint binds it too."""
        return _parse_address("listen", self.listen)[0]

    def plaintext_exposures(self) -> list[str]:
        """The listeners that accept connections from other hosts without TLS, each named
        with its setting: what the node warns about at start (anyone who reaches such a port
        reads the data, or with the node-to-node one takes part in replication)."""
        return [
            f"{key} {address} is not a loopback address and has no TLS ({protocol_key}="
            f"{protocol}): anyone who reaches it {what}"
            for key, address, protocol_key, protocol, what in (
                ("listen", self.listen, "security.protocol", self.security_protocol,
                 "can read and write every topic"),
                ("internal.listen", self.internal_listen, "security.inter.broker.protocol",
                 self.security_inter_broker_protocol, "can speak Raft with this node"),
                ("kafka.listen", self.kafka_listen, "kafka.security.protocol"
                 if self.kafka_security_protocol else "security.protocol", self.kafka_protocol,
                 "can read every record sent over it, and with SASL/PLAIN the passwords"
                 if self.kafka_protocol == "SASL_PLAINTEXT" else
                 "can read and write every topic"),
            )
            if address and protocol in ("PLAINTEXT", "SASL_PLAINTEXT")
            and not _is_loopback(_parse_address(key, address)[0])
        ]

    @property
    def advertised_address(self) -> str:
        """The address to publish: the explicit one, else what the node listens on."""
        return self.advertised or self.listen

    def bound(self, port: int, internal_port: int) -> NodeConfig:
        """This config once the servers have bound ``port`` and ``internal_port`` (which differ
        when a listener asked for port 0): the runtime must publish the real addresses, to
        peers and in Metadata."""
        listen = format_address(_parse_address("listen", self.listen)[0], port)
        internal = format_address(
            _parse_address("internal.listen", self.internal_listen)[0], internal_port
        )
        advertised = self.advertised or listen
        peers = dict(self.peers)
        own = peers.get(self.node_id)
        if self.node_id >= 0 and (own is None or _parse_address("peers", own)[1] == 0):
            peers[self.node_id] = internal
        return dataclasses.replace(
            self, listen=listen, internal_listen=internal, advertised=advertised, peers=peers
        )

    def with_dynamic(self, *layers: Mapping[str, str]) -> NodeConfig:
        """This config with the dynamic node settings (`DYNAMIC_KEYS`) of `layers` on top, the
        last layer winning; keys of other settings (the topic defaults) are ignored. A value
        that does not parse or validate raises InvalidConfigError, as in a properties file."""
        changed = {KEYS[key]: _convert(key, KEYS[key], value.strip())
                   for layer in layers for key, value in layer.items() if key in DYNAMIC_KEYS}
        return dataclasses.replace(self, **changed) if changed else self

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> NodeConfig:
        """Builds a config from Kafka-style ``key -> value`` strings (file, flags, --set)."""
        missing = [key for key in _REQUIRED if not props.get(key)]
        if not props.get("node.id") and not props.get("controller.quorum.bootstrap.servers"):
            missing.insert(0, "node.id")
        if missing:
            raise InvalidConfigError(f"missing required setting(s): {', '.join(missing)}")
        known: dict[str, Any] = {}
        extra: dict[str, str] = {}
        for key, value in props.items():
            name = KEYS.get(key)
            if name is None:
                extra[_check_topic_key(key)] = value
            else:
                known[name] = _convert(key, name, value.strip())
        known.setdefault("node_id", -1)
        return cls(**known, extra=extra)

    @classmethod
    def load(cls, path: Path | None, overrides: Mapping[str, str]) -> NodeConfig:
        """Reads an optional properties file; ``overrides`` (from flags) win over it."""
        props = read_properties(path) if path is not None else {}
        props.update(overrides)
        return cls.from_properties(props)

    def to_properties(self) -> dict[str, str]:
        """The inverse of :meth:`from_properties`, so a launcher can hand a node its config."""
        props: dict[str, str] = {}
        for name, key in _FIELD_TO_KEY.items():
            value = getattr(self, name)
            if name in ("peers", "client_addresses"):
                value = format_peers(value)
            elif name in ("super_users", "node_principals"):
                value = ";".join(value)
            elif name in ("group_consumer_assignors", "sasl_enabled_mechanisms"):
                value = ",".join(value)
            elif name == "node_id" and value == -1:
                value = ""  # to be assigned when the node joins
            elif value is None:
                value = ""  # unset: the default applies on the other side too
            elif isinstance(value, bool):
                value = "true" if value else "false"  # as Kafka writes and shows booleans
            if value != "":
                props[key] = str(value)
        props.update(self.extra)
        return props


def key_for(name: str) -> str:
    """The Kafka-style key for a Python-style name: ``segment_bytes`` -> ``segment.bytes``.

    Lets ``LocalCluster(segment_bytes=1024)`` and ``LocalCluster(**{"segment.bytes": ...})`` mean
    the same thing; a name that is not a node setting is taken as a topic default.
    """
    return _FIELD_TO_KEY.get(name, name.replace("_", "."))


def parse_peers(text: str) -> dict[int, str]:
    """Parses ``1=127.0.0.1:7420,2=127.0.0.1:7421``."""
    peers: dict[int, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        node_id, sep, address = item.partition("=")
        if not sep or not node_id.strip().isdigit():
            raise InvalidConfigError(
                f"peers: expected NODE_ID=HOST:PORT, got {item!r} "
                "(example: 1=127.0.0.1:7420,2=127.0.0.1:7421)"
            )
        peer_id = int(node_id)
        if peer_id in peers:
            raise InvalidConfigError(f"peers: node {peer_id} is listed twice")
        peers[peer_id] = address.strip()
    return peers


def format_peers(peers: Mapping[int, str]) -> str:
    return ",".join(f"{node_id}={address}" for node_id, address in sorted(peers.items()))


def _parse_address(what: str, address: str) -> tuple[str, int]:
    """Splits ``host:port`` (``[::1]:port`` for IPv6) with a clear error naming ``what``."""
    parts = split_address(address)
    if parts is None:
        raise InvalidConfigError(f"{what}: expected HOST:PORT, got {address!r}")
    return parts


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _is_wildcard(host: str) -> bool:
    """0.0.0.0 or :: (every address of the host): fine to bind, useless to publish."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _convert(key: str, name: str, value: str) -> Any:
    if name == "data_dir":
        return Path(value)
    if name in ("peers", "client_addresses"):
        return parse_peers(value)
    if name in ("listen", "advertised", "join", "log_flush_policy", "internal_listen",
                "kafka_listen", "kafka_advertised",
                "ssl_certfile", "ssl_keyfile", "ssl_cafile", "ssl_client_auth", "log_format",
                "event_loop",
                "internal_ssl_cafile", "authorizer", "metrics_host", "metrics_auth_token_file"):
        return value
    if name in ("security_protocol", "security_inter_broker_protocol",
                "kafka_security_protocol"):
        return value.upper()
    if name in ("test_ack_before_commit", "test_offsets_ack_before_commit",
                "test_groups_grant_before_revoke", "test_txn_markers_before_prepare"):
        if value.lower() not in ("true", "false"):
            raise InvalidConfigError(f"{key} must be true or false, got {value!r}")
        return value.lower() == "true"
    if name in ("super_users", "node_principals"):
        return tuple(filter(None, (part.strip() for part in value.split(";"))))
    if name == "sasl_enabled_mechanisms":
        return tuple(filter(None, (part.strip().upper() for part in value.split(","))))
    if name == "group_consumer_assignors":
        return tuple(filter(None, (part.strip() for part in value.split(","))))
    if name in ("auto_leader_rebalance_enable", "allow_everyone_if_no_acl_found",
                "auto_create_topics_enable",
                "partition_autobalancing_enable", "transaction_partition_verification_enable",
                "metrics_topic_labels"):
        if value.lower() not in ("true", "false"):
            raise InvalidConfigError(f"{key} must be true or false, got {value!r}")
        return value.lower() == "true"
    if name in ("test_drop_produce_response_rate", "offsets_retention_minutes"):
        try:
            return float(value)
        except ValueError:
            raise InvalidConfigError(f"{key} must be a number, got {value!r}") from None
    try:
        return int(value)
    except ValueError:
        raise InvalidConfigError(f"{key} must be an integer, got {value!r}") from None


def _check_topic_key(key: str) -> str:
    """Refuses malformed keys and near-misses of node keys, so a typo such as
    ``segment.byte`` is an error instead of a silently ignored topic default."""
    if not _KEY_PATTERN.fullmatch(key):
        raise InvalidConfigError(f"invalid setting name {key!r}")
    close = difflib.get_close_matches(key, KEYS, n=1, cutoff=0.85)
    if close:
        raise InvalidConfigError(f"unknown setting {key!r}; did you mean {close[0]!r}?")
    return key


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidConfigError(message)
