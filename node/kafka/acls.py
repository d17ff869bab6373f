"""DescribeAcls (key 29), CreateAcls (30) and DeleteAcls (31), v1-3, onto Tidelog's ACL
handlers (node/api/acls.py), which check the caller's rights on the cluster (DESCRIBE to
describe, ALTER to create or delete: CLUSTER_AUTHORIZATION_FAILED (31) otherwise), validate
each ACL and filter (INVALID_REQUEST (42)), and answer SECURITY_DISABLED (54) on a node
without an authorizer. The codes of resource types, pattern types, operations and
permissions are Kafka's on both sides.

A filter field of 0 (Kafka's UNKNOWN) is taken as ANY, as Tidelog's own requests mean an
unset field; Kafka's clients send ANY (1) for "any".
"""

from __future__ import annotations

import datetime
from typing import Any

from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.changes import error_message
from tidelog.node.kafka.codec import response_type
from tidelog.node.kafka.fields import build, entity_of, error_code
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.v1 import tidelog_pb2 as pb

DESCRIBE_ACLS_KEY, CREATE_ACLS_KEY, DELETE_ACLS_KEY = 29, 30, 31
_NO_THROTTLE = datetime.timedelta(0)


def _filter(kafka: Any) -> pb.AclFilter:
    """Tidelog's filter of a DescribeAcls request or a DeleteAcls filter (same fields)."""
    return pb.AclFilter(
        resource_type_filter=kafka.resource_type_filter,
        resource_name_filter=kafka.resource_name_filter,
        pattern_type_filter=kafka.pattern_type_filter,
        principal_filter=kafka.principal_filter,
        host_filter=kafka.host_filter,
        operation=kafka.operation,
        permission_type=kafka.permission_type,
    )


class AclsAdapter:
    def __init__(self, servicer: Any) -> None:
        self._servicer = servicer

    async def describe_acls(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(DESCRIBE_ACLS_KEY, call.api_version)
        resource_type = entity_of(response, "DescribeAclsResource")
        acl_type = entity_of(response, "AclDescription")
        answer: pb.DescribeAclsResponse = await self._servicer.DescribeAcls(
            pb.DescribeAclsRequest(filter=_filter(request)), call
        )
        return build(
            response, throttle_time=_NO_THROTTLE, error_code=error_code(answer.error_code),
            error_message=error_message(answer.error_message),
            resources=tuple(
                build(resource_type, resource_type=r.resource_type,
                      resource_name=r.resource_name, pattern_type=r.pattern_type,
                      acls=tuple(
                          build(acl_type, principal=a.principal, host=a.host,
                                operation=a.operation, permission_type=a.permission_type)
                          for a in r.acls
                      ))
                for r in answer.resources
            ),
        )

    async def create_acls(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(CREATE_ACLS_KEY, call.api_version)
        result_type = entity_of(response, "AclCreationResult")
        answer: pb.CreateAclsResponse = await self._servicer.CreateAcls(
            pb.CreateAclsRequest(creations=[
                pb.AclCreation(
                    resource_type=c.resource_type, resource_name=c.resource_name,
                    resource_pattern_type=c.resource_pattern_type, principal=c.principal,
                    host=c.host, operation=c.operation, permission_type=c.permission_type,
                )
                for c in request.creations
            ]),
            call,
        )
        return build(response, throttle_time=_NO_THROTTLE, results=tuple(
            build(result_type, error_code=error_code(r.error_code),
                  error_message=error_message(r.error_message))
            for r in answer.results
        ))

    async def delete_acls(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(DELETE_ACLS_KEY, call.api_version)
        result_type = entity_of(response, "DeleteAclsFilterResult")
        matching_type = entity_of(response, "DeleteAclsMatchingAcl")
        answer: pb.DeleteAclsResponse = await self._servicer.DeleteAcls(
            pb.DeleteAclsRequest(filters=[_filter(f) for f in request.filters]), call
        )
        return build(response, throttle_time=_NO_THROTTLE, filter_results=tuple(
            build(
                result_type, error_code=error_code(r.error_code),
                error_message=error_message(r.error_message),
                matching_acls=tuple(
                    build(matching_type, error_code=error_code(m.error_code),
                          error_message=error_message(m.error_message),
                          resource_type=m.resource_type, resource_name=m.resource_name,
                          pattern_type=m.pattern_type, principal=m.principal, host=m.host,
                          operation=m.operation, permission_type=m.permission_type)
                    for m in r.matching_acls
                ),
            )
            for r in answer.filter_results
        ))


def add_acls(registry: ApiRegistry, servicer: Any) -> None:
    adapter = AclsAdapter(servicer)
    registry.add(DESCRIBE_ACLS_KEY, 1, 3, adapter.describe_acls)
    registry.add(CREATE_ACLS_KEY, 1, 3, adapter.create_acls)
    registry.add(DELETE_ACLS_KEY, 1, 3, adapter.delete_acls)
