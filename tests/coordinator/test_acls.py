"""The ACL model alone (no cluster): the decision as Kafka's StandardAuthorizer makes it, the
filters of DescribeAcls/DeleteAcls, the controller's plans, and the ACL records of the metadata
log (round trip, strict decoding, replay to the same image)."""

from __future__ import annotations

import pytest

from tidelog.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from tidelog.coordinator.acls import AclIndex, Authorizer
from tidelog.coordinator.controller import MetadataImage
from tidelog.coordinator.metadata_records import (
    AccessControlEntryRecord,
    MetadataRecordError,
    RemoveAccessControlEntryRecord,
    decode_record,
    encode_record,
)
from tidelog.errors import (
    ConfigurationError,
    InvalidConfigError,
    InvalidRequestError,
    TopicAuthorizationFailedError,
)
from tidelog.node.api.authorization import Authorization
from tidelog.node.config import NodeConfig

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation
ALICE, BOB = "User:alice", "User:bob"


def acl(
    principal: str, op: Operation, name: str, *, kind: ResourceType = TOPIC,
    pattern: PatternType = LITERAL, permission: Permission = ALLOW,
) -> AclBinding:
    return AclBinding(ResourcePattern(kind, name, pattern),
                      AccessControlEntry(principal, op, permission))


def authorizer(*bindings: AclBinding, super_users: tuple[str, ...] = (),
               allow_everyone: bool = True) -> Authorizer:
    index = AclIndex()
    for i, binding in enumerate(bindings, start=1):
        index.add(i, binding)
    return Authorizer(index, super_users, allow_everyone)


# ---- the node's settings ------------------------------------------------------------------------


def node_authorization(**settings: str) -> Authorization:
    config = NodeConfig.from_properties(
        {"node.id": "1", "listen": "127.0.0.1:7420", "data.dir": "/tmp/x", **settings})
    assert NodeConfig.from_properties(config.to_properties()) == config
    return Authorization(config, authorizer(acl(ALICE, Op.READ, "a")).acls)


def test_the_authorizer_off_allows_everything_and_refuses_to_manage_acls() -> None:
    """authorizer=none (the default): the ACLs decide nothing, and the ACL APIs answer
    SECURITY_DISABLED (54) rather than store ACLs that would not apply."""
    off = node_authorization()
    assert off.refused(BOB, Op.READ, TOPIC, "a") is None
    assert off.refused(BOB, Op.ALTER, CLUSTER, CLUSTER_NAME) is None
    assert off.allowed_any(BOB, Op.WRITE, TOPIC)
    disabled = off.disabled()
    assert disabled is not None and disabled.code == 54


def test_the_authorizer_on_denies_what_no_acl_allows_unless_told_otherwise() -> None:
    """authorizer=acl: allow.everyone.if.no.acl.found unset is Kafka's false, so a resource no
    ACL mentions (topic b, the cluster) is closed; set to true it opens them again."""
    on = node_authorization(authorizer="acl")
    assert on.disabled() is None
    assert on.refused(ALICE, Op.READ, TOPIC, "a") is None
    assert isinstance(on.refused(BOB, Op.READ, TOPIC, "a"), TopicAuthorizationFailedError)
    assert isinstance(on.refused(BOB, Op.READ, TOPIC, "b"), TopicAuthorizationFailedError)
    assert on.cluster_refused(BOB, Op.DELETE) is not None
    assert not on.allowed_any(BOB, Op.WRITE, TOPIC)
    opened = node_authorization(authorizer="acl", **{"allow.everyone.if.no.acl.found": "true"})
    assert opened.refused(BOB, Op.READ, TOPIC, "b") is None
    assert opened.cluster_refused(BOB, Op.DELETE) is None
    assert opened.refused(BOB, Op.READ, TOPIC, "a") is not None


def test_an_unknown_authorizer_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match="authorizer must be 'none' or 'acl'"):
        node_authorization(authorizer="kafka")


# ---- the decision -------------------------------------------------------------------------------


def test_without_acls_allow_everyone_decides() -> None:
    assert authorizer().authorize(ALICE, Op.WRITE, TOPIC, "a")
    assert not authorizer(allow_everyone=False).authorize(ALICE, Op.WRITE, TOPIC, "a")


def test_acls_on_a_resource_deny_everyone_they_do_not_allow() -> None:
    """allow.everyone.if.no.acl.found only helps resources no ACL mentions."""
    auth = authorizer(acl(ALICE, Op.READ, "a"))
    assert auth.authorize(ALICE, Op.READ, TOPIC, "a")
    assert not auth.authorize(BOB, Op.READ, TOPIC, "a")
    assert not auth.authorize(ALICE, Op.WRITE, TOPIC, "a")
    assert auth.authorize(BOB, Op.WRITE, TOPIC, "b")  # no ACL on b
    assert auth.authorize(BOB, Op.READ, GROUP, "a")  # nor on the group of that name


def test_deny_wins_over_allow_and_all() -> None:
    auth = authorizer(acl(ALICE, Op.ALL, "a"), acl(ALICE, Op.WRITE, "a", permission=DENY))
    assert auth.authorize(ALICE, Op.READ, TOPIC, "a")
    assert not auth.authorize(ALICE, Op.WRITE, TOPIC, "a")
    everything_denied = authorizer(acl(ALICE, Op.READ, "a"),
                                   acl("User:*", Op.ALL, "*", permission=DENY))
    assert not everything_denied.authorize(ALICE, Op.READ, TOPIC, "a")


def test_describe_is_implied_by_an_allow_of_read_write_delete_or_alter() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert authorizer(acl(ALICE, op, "a")).authorize(ALICE, Op.DESCRIBE, TOPIC, "a"), op
    for op in (Op.CREATE, Op.DESCRIBE_CONFIGS, Op.IDEMPOTENT_WRITE):
        assert not authorizer(acl(ALICE, op, "a")).authorize(ALICE, Op.DESCRIBE, TOPIC, "a"), op
    configs = authorizer(acl(ALICE, Op.ALTER_CONFIGS, "a"))
    assert configs.authorize(ALICE, Op.DESCRIBE_CONFIGS, TOPIC, "a")
    assert not configs.authorize(ALICE, Op.DESCRIBE, TOPIC, "a")


def test_deny_is_never_widened() -> None:
    """A DENY of READ does not deny DESCRIBE (which a READ allow would grant)."""
    auth = authorizer(acl(ALICE, Op.DESCRIBE, "a"), acl(ALICE, Op.READ, "a", permission=DENY))
    assert auth.authorize(ALICE, Op.DESCRIBE, TOPIC, "a")
    assert not auth.authorize(ALICE, Op.READ, TOPIC, "a")


def test_prefixed_patterns_cover_names_they_begin() -> None:
    auth = authorizer(
        acl(ALICE, Op.READ, "orders.", pattern=PREFIXED),
        acl(ALICE, Op.READ, "orders.secret", pattern=PREFIXED, permission=DENY),
        acl(BOB, Op.READ, "o", pattern=PREFIXED),
    )
    assert auth.authorize(ALICE, Op.READ, TOPIC, "orders.eu")
    assert auth.authorize(ALICE, Op.READ, TOPIC, "orders.")
    assert not auth.authorize(ALICE, Op.READ, TOPIC, "orders.secret.keys")
    assert not auth.authorize(ALICE, Op.READ, TOPIC, "orders")  # shorter than the prefix
    assert not auth.authorize(ALICE, Op.READ, TOPIC, "ordersX")  # "o" has ACLs (for bob)
    assert auth.authorize(BOB, Op.READ, TOPIC, "orders.secret")  # the deny is alice's
    assert auth.authorize(ALICE, Op.READ, TOPIC, "x")  # nothing applies


def test_a_literal_star_names_every_resource_and_user_star_every_principal() -> None:
    auth = authorizer(acl("User:*", Op.READ, "*"), acl(BOB, Op.READ, "*", kind=GROUP,
                                                         permission=DENY))
    assert auth.authorize(ALICE, Op.READ, TOPIC, "anything")
    assert not auth.authorize(ALICE, Op.WRITE, TOPIC, "anything")
    assert not auth.authorize(BOB, Op.READ, GROUP, "g")
    # A literal "*" is not a prefix: it does not match a topic named "*x" by its first char.
    assert auth.authorize(ALICE, Op.READ, TOPIC, "*x")


def test_super_users_pass_even_over_deny() -> None:
    auth = authorizer(acl(ALICE, Op.ALL, "*", permission=DENY), super_users=(ALICE,),
                      allow_everyone=False)
    assert auth.authorize(ALICE, Op.ALTER, CLUSTER, CLUSTER_NAME)
    assert auth.authorize(ALICE, Op.READ, TOPIC, "a")
    assert not auth.authorize(BOB, Op.READ, TOPIC, "a")


def test_removing_acls_restores_the_default() -> None:
    index = AclIndex()
    index.add(1, acl(ALICE, Op.READ, "a."), )
    index.add(2, acl(ALICE, Op.READ, "a.", pattern=PREFIXED))
    index.add(3, acl(ALICE, Op.READ, "bb", pattern=PREFIXED))
    auth = Authorizer(index)
    assert not auth.authorize(BOB, Op.READ, TOPIC, "a.x")
    index.remove(2)
    assert auth.authorize(BOB, Op.READ, TOPIC, "a.x")
    assert not auth.authorize(BOB, Op.READ, TOPIC, "a.")
    index.remove(1)
    index.remove(1)  # a replayed removal changes nothing
    assert auth.authorize(BOB, Op.READ, TOPIC, "a.")
    assert not auth.authorize(BOB, Op.READ, TOPIC, "bbb")
    assert len(index) == 1


def test_authorize_by_resource_type() -> None:
    """InitProducerId's 'WRITE on any topic' (Kafka's authorizeByResourceType)."""
    assert authorizer().authorize_by_resource_type(ALICE, Op.WRITE, TOPIC)
    closed = authorizer(allow_everyone=False)
    assert not closed.authorize_by_resource_type(ALICE, Op.WRITE, TOPIC)
    assert authorizer(acl(ALICE, Op.WRITE, "a"), allow_everyone=False
                      ).authorize_by_resource_type(ALICE, Op.WRITE, TOPIC)
    covered = authorizer(acl(ALICE, Op.WRITE, "a.b"), acl(ALICE, Op.WRITE, "a", pattern=PREFIXED,
                                                          permission=DENY), allow_everyone=False)
    assert not covered.authorize_by_resource_type(ALICE, Op.WRITE, TOPIC)
    star_denied = authorizer(acl(ALICE, Op.WRITE, "x", pattern=PREFIXED),
                             acl(ALICE, Op.ALL, "*", permission=DENY), allow_everyone=False)
    assert not star_denied.authorize_by_resource_type(ALICE, Op.WRITE, TOPIC)
    assert authorizer(super_users=(ALICE,), allow_everyone=False
                      ).authorize_by_resource_type(ALICE, Op.WRITE, TOPIC)


# ---- filters ----------------------------------------------------------------------------------


def test_filters_select_as_kafka_filters_do() -> None:
    bindings = [
        acl(ALICE, Op.READ, "orders"),
        acl(ALICE, Op.READ, "*"),
        acl(BOB, Op.WRITE, "ord", pattern=PREFIXED),
        acl(BOB, Op.WRITE, "orders", pattern=PREFIXED, permission=DENY),
        acl(ALICE, Op.READ, "orders", kind=GROUP),
    ]

    def selected(acl_filter: AclBindingFilter) -> list[int]:
        return [i for i, b in enumerate(bindings) if acl_filter.matches(b)]

    assert selected(AclBindingFilter()) == [0, 1, 2, 3, 4]
    assert selected(AclBindingFilter(ResourcePatternFilter(TOPIC, "orders"))) == [0, 3]
    assert selected(AclBindingFilter(ResourcePatternFilter(TOPIC, "orders", LITERAL))) == [0]
    match = ResourcePatternFilter(TOPIC, "orders", PatternType.MATCH)
    assert selected(AclBindingFilter(match)) == [0, 1, 2, 3]
    assert selected(AclBindingFilter(match, AccessControlEntryFilter(BOB))) == [2, 3]
    assert selected(AclBindingFilter(entry=AccessControlEntryFilter(permission=DENY))) == [3]
    assert selected(AclBindingFilter(entry=AccessControlEntryFilter(operation=Op.READ))) == [
        0, 1, 4]


def test_kafka_acls_spellings_parse() -> None:
    assert Operation.parse("describe-configs") is Op.DESCRIBE_CONFIGS
    assert ResourceType.parse("Transactional_Id") is ResourceType.TRANSACTIONAL_ID
    with pytest.raises(ConfigurationError, match="unknown Operation 'reed'"):
        Operation.parse("reed")


# ---- plans and records ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("binding", "why"),
    [
        (acl(ALICE, Op.ANY, "a"), "operation ANY"),
        (acl(ALICE, Op.UNKNOWN, "a"), "operation UNKNOWN"),
        (acl(ALICE, Op.READ, "a", kind=ResourceType.ANY), "resource type ANY"),
        (acl(ALICE, Op.READ, "a", pattern=PatternType.MATCH), "pattern type MATCH"),
        (acl(ALICE, Op.READ, "a", permission=Permission.ANY), "permission ANY"),
        (acl(ALICE, Op.READ, ""), "name is empty"),
        (acl("alice", Op.READ, "a"), "Type:name"),
        (acl(ALICE, Op.ALTER, "other", kind=CLUSTER), "kafka-cluster"),
        (AclBinding(ResourcePattern(TOPIC, "a"),
                    AccessControlEntry(ALICE, Op.READ, ALLOW, "10.0.0.1")), "every host"),
    ],
)
def test_create_refuses_what_kafka_refuses(binding: AclBinding, why: str) -> None:
    records, outcomes = MetadataImage().plan_create_acls([binding])
    assert records == []
    assert isinstance(outcomes[0], InvalidRequestError)
    assert why in str(outcomes[0])


def test_plans_replay_to_the_same_image_through_encoded_records() -> None:
    leader = MetadataImage()
    log: list[bytes] = []

    def commit(records: list[AccessControlEntryRecord] | list[RemoveAccessControlEntryRecord]
               ) -> None:
        for record in records:
            leader.apply(len(log), record)
            log.append(encode_record(record))

    a, b, c = acl(ALICE, Op.READ, "a"), acl(BOB, Op.WRITE, "b", pattern=PREFIXED), \
        acl(ALICE, Op.ALTER, CLUSTER_NAME, kind=CLUSTER)
    records, outcomes = leader.plan_create_acls([a, b, a, acl(ALICE, Op.ANY, "x")])
    assert [r.acl_id for r in records] == [1, 2]  # the repeated binding is written once
    assert outcomes[:3] == [None, None, None] and outcomes[3] is not None
    commit(records)
    records, outcomes = leader.plan_create_acls([a, c])
    assert [(r.acl_id, r.binding) for r in records] == [(3, c)]  # a exists: nothing written
    commit(records)
    removals, matched = leader.plan_delete_acls([
        AclBindingFilter(entry=AccessControlEntryFilter(principal=ALICE)),
        AclBindingFilter(ResourcePatternFilter(TOPIC, "a", PatternType.MATCH)),
        AclBindingFilter(ResourcePatternFilter(ResourceType.UNKNOWN)),
    ])
    assert removals == [RemoveAccessControlEntryRecord(1), RemoveAccessControlEntryRecord(3)]
    assert matched[:2] == [[a, c], [a]]
    assert isinstance(matched[2], InvalidRequestError)
    commit(removals)
    assert leader.acls.items() == [(2, b)]
    assert leader.plan_create_acls([a])[0][0].acl_id == 4  # ids are never reused

    follower = MetadataImage()
    for offset, raw in enumerate(log):
        follower.apply(offset, decode_record(raw))
    assert follower.acls == leader.acls and follower.next_acl_id == leader.next_acl_id
    assert Authorizer(follower.acls).authorize(BOB, Op.WRITE, TOPIC, "bx")
    assert not Authorizer(follower.acls).authorize(ALICE, Op.WRITE, TOPIC, "bx")


ACL_RECORDS = [
    AccessControlEntryRecord(1, acl(ALICE, Op.IDEMPOTENT_WRITE, CLUSTER_NAME, kind=CLUSTER)),
    AccessControlEntryRecord(2**40, acl("User:CN=ü,O=x", Op.READ, "grü", kind=GROUP,
                                        pattern=PREFIXED, permission=DENY)),
    RemoveAccessControlEntryRecord(7),
]


@pytest.mark.parametrize("record", ACL_RECORDS)
def test_acl_records_round_trip_and_refuse_truncation(
    record: AccessControlEntryRecord | RemoveAccessControlEntryRecord,
) -> None:
    encoded = encode_record(record)
    assert decode_record(encoded) == record
    for end in range(len(encoded)):
        with pytest.raises(MetadataRecordError):
            decode_record(encoded[:end])
    with pytest.raises(MetadataRecordError, match="left over"):
        decode_record(encoded + b"\0")


def _damaged(record: AccessControlEntryRecord, at: int, value: int) -> bytes:
    encoded = bytearray(encode_record(record))
    encoded[at] = value
    return bytes(encoded)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        # Byte 10 is the resource type, after the format, the kind and the id.
        (_damaged(ACL_RECORDS[0], 10, 99), "unknown ResourceType code 99"),
        (_damaged(ACL_RECORDS[0], 10, 1), "resource type ANY cannot be stored"),
        (_damaged(ACL_RECORDS[0], len(encode_record(ACL_RECORDS[0])) - 1, 1),
         "permission ANY cannot be stored"),
        (_damaged(ACL_RECORDS[0], len(encode_record(ACL_RECORDS[0])) - 2, 77),
         "unknown Operation code 77"),
        (encode_record(AccessControlEntryRecord(0, ACL_RECORDS[0].binding)), "id 0 is not >= 1"),
        (encode_record(RemoveAccessControlEntryRecord(-3)), "id -3 is not >= 1"),
        (encode_record(AccessControlEntryRecord(1, acl("nobody", Op.READ, "a"))), "Type:name"),
    ],
)
def test_a_damaged_acl_record_is_a_clear_error(raw: bytes, why: str) -> None:
    with pytest.raises(MetadataRecordError, match=why):
        decode_record(raw)
