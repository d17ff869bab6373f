"""What every handler of the client API asks before it acts: who is calling, and which of the
resources a request names the caller may act on (kafka-mapping §11.3).

One `Authorization` per node, over the ACLs of its metadata image, so a decision takes the ACL
records this node has applied. A handler asks `refusals` for the names its request carries (a
topic per partition, a group, a transactional id, the cluster) and answers the refused ones
with the error of their resource type, naming principal, operation and resource: TOPIC
(29) per partition while the others are served, GROUP (30), CLUSTER (31), TRANSACTIONAL_ID (53).
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc

from tidelog import errors
from tidelog.acl import CLUSTER_NAME, Operation, ResourceType
from tidelog.coordinator.acls import AclIndex, Authorizer
from tidelog.node.api.forwarding import principal_of_call
from tidelog.node.config import NodeConfig

_REFUSED: dict[ResourceType, type[errors.AuthorizationError]] = {
    ResourceType.TOPIC: errors.TopicAuthorizationFailedError,
    ResourceType.GROUP: errors.GroupAuthorizationFailedError,
    ResourceType.CLUSTER: errors.ClusterAuthorizationFailedError,
    ResourceType.TRANSACTIONAL_ID: errors.TransactionalIdAuthorizationFailedError,
}


class Authorization:
    def __init__(self, config: NodeConfig, acls: AclIndex) -> None:
        #: False with ``authorizer=none``: every request is allowed and the ACL records the
        #: image holds decide nothing (Kafka without an authorizer).
        self.enabled = config.authorizer == "acl"
        # allow.everyone.if.no.acl.found unset is false, as in Kafka: on means deny by default.
        self.authorizer = Authorizer(
            acls, config.super_users, bool(config.allow_everyone_if_no_acl_found)
        )

    def disabled(self) -> errors.SecurityDisabledError | None:
        """What the ACL APIs answer when no authorizer runs (Kafka's SECURITY_DISABLED, 54):
        an ACL created then would be stored and silently ignored."""
        if self.enabled:
            return None
        return errors.SecurityDisabledError(
            "no authorizer is configured (authorizer=none): ACLs are not enforced; "
            "start the nodes with authorizer=acl to manage them"
        )

    def principal(self, context: grpc.aio.ServicerContext) -> str:
        """The caller's principal: the connection's, or for a request another node forwarded
        (which only a node principal can do, node.forwarding), its client's."""
        return principal_of_call(context)

    def refused(
        self, principal: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> errors.AuthorizationError | None:
        """None when allowed, else the error to answer, naming who may not do what to what."""
        if not self.enabled or self.authorizer.authorize(
            principal, operation, resource_type, name
        ):
            return None
        what = resource_type.name.lower().replace("_", " ")
        return _REFUSED[resource_type](
            f"{principal} is not authorized to {operation.name} {what} {name!r}"
        )

    def refusals(
        self,
        principal: str,
        operation: Operation,
        resource_type: ResourceType,
        names: Iterable[str],
    ) -> dict[str, errors.AuthorizationError]:
        """The refused names among `names`, each decided once however often it appears (a
        topic per partition of a request)."""
        out: dict[str, errors.AuthorizationError] = {}
        for name in dict.fromkeys(names):
            refused = self.refused(principal, operation, resource_type, name)
            if refused is not None:
                out[name] = refused
        return out

    def cluster_refused(
        self, principal: str, operation: Operation
    ) -> errors.AuthorizationError | None:
        return self.refused(principal, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def caller_cluster_refused(
        self, context: grpc.aio.ServicerContext, operation: Operation
    ) -> errors.AuthorizationError | None:
        """`cluster_refused` for the caller of `context`."""
        return self.cluster_refused(self.principal(context), operation)

    def allowed_any(
        self, principal: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Whether some resource of the type allows the operation (Kafka's
        authorizeByResourceType)."""
        return not self.enabled or self.authorizer.authorize_by_resource_type(
            principal, operation, resource_type
        )
