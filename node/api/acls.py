"""CreateAcls, DescribeAcls and DeleteAcls (kafka-mapping §11.3-11.4).

Changes go through the controller as topic changes do (any node forwards them there): the
controller leader checks ALTER on the cluster, plans the records on its image
(`MetadataImage.plan_create_acls` / `plan_delete_acls`) and commits them in one batch; every
node then applies them to the ACLs it authorizes with. One change at a time on a node, so each
plan sees the ids the previous one took. DescribeAcls needs DESCRIBE on the cluster and is
answered by any node from the ACLs it has applied.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from enum import IntEnum
from typing import Any, TypeVar

import grpc

from tidelog import errors
from tidelog.acl import (
    WILDCARD,
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
from tidelog.node.api.controller_api import ControllerApi
from tidelog.node.api.forwarding import FORWARD_TIMEOUT_S, at_controller
from tidelog.node.api.rules import error_answer
from tidelog.v1 import tidelog_pb2 as pb

E = TypeVar("E", bound=IntEnum)


class AclApi(ControllerApi):
    def failed(self, method: str, request: Any, exc: errors.TidelogError) -> Any:
        return all_failed(method, request, exc)

    async def create_acls(
        self, request: pb.CreateAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateAclsResponse:
        return await self._unless_disabled(  # type: ignore[no-any-return]
            "CreateAcls", request, context, self._create_acls
        )

    async def delete_acls(
        self, request: pb.DeleteAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteAclsResponse:
        return await self._unless_disabled(  # type: ignore[no-any-return]
            "DeleteAcls", request, context, self._delete_acls
        )

    async def _unless_disabled(
        self, method: str, request: Any, context: grpc.aio.ServicerContext,
        handler: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
    ) -> Any:
        """A change refused whole where authorization is off, before it is forwarded."""
        if (disabled := self.authorization.disabled()) is not None:
            return all_failed(method, request, disabled)
        return await handler(request, context)

    @at_controller("CreateAcls")
    async def _create_acls(
        self, request: pb.CreateAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateAclsResponse:
        def answer(outcomes: list[errors.TidelogError | None]) -> pb.CreateAclsResponse:
            response = pb.CreateAclsResponse()
            for error in outcomes:
                response.results.add(
                    error_code=error.code if error else 0,
                    error_message=str(error) if error else "",
                )
            return response

        return await self._change_acls(  # type: ignore[no-any-return]
            "CreateAcls", request, context, request.creations, _binding_of, AclBinding,
            lambda valid: self.controller.image.plan_create_acls(valid), answer,
        )

    @at_controller("DeleteAcls")
    async def _delete_acls(
        self, request: pb.DeleteAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteAclsResponse:
        def answer(
            outcomes: list[list[AclBinding] | errors.TidelogError],
        ) -> pb.DeleteAclsResponse:
            response = pb.DeleteAclsResponse()
            for outcome in outcomes:
                result = response.filter_results.add()
                if isinstance(outcome, errors.TidelogError):
                    result.error_code, result.error_message = outcome.code, str(outcome)
                    continue
                for binding in outcome:
                    pattern, entry = binding.pattern, binding.entry
                    result.matching_acls.add(
                        resource_type=pattern.resource_type,
                        resource_name=pattern.name,
                        pattern_type=pattern.pattern_type,
                        principal=entry.principal,
                        host=entry.host,
                        operation=entry.operation,
                        permission_type=entry.permission,
                    )
            return response

        return await self._change_acls(  # type: ignore[no-any-return]
            "DeleteAcls", request, context, request.filters, _filter_of, AclBindingFilter,
            lambda valid: self.controller.image.plan_delete_acls(valid), answer,
        )

    async def _change_acls(
        self,
        method: str,
        request: Any,
        context: grpc.aio.ServicerContext,
        items: Iterable[Any],
        parse: Callable[[Any], Any],
        kind: type,
        plan: Callable[[list[Any]], tuple[Any, list[Any]]],
        answer: Callable[[list[Any]], Any],
    ) -> Any:
        """The shared course of CreateAcls and DeleteAcls on the controller leader: ALTER on
        the cluster checked, each item parsed (a bad one fails alone), the valid ones planned
        on the image as the records are proposed, and ``answer`` given every item's outcome
        in the request's order once the records committed."""
        refused = self.authorization.caller_cluster_refused(context, Operation.ALTER)
        if refused is not None:
            return all_failed(method, request, refused)
        parsed = [_parsed(parse, item) for item in items]
        valid = [item for item in parsed if isinstance(item, kind)]
        planned: list[Any] = []

        def plan_records() -> Any:
            records, outcomes = plan(valid)
            planned[:] = outcomes
            return records

        try:
            await self._change(plan_records, context)
        except errors.TidelogError as exc:
            return all_failed(method, request, exc)
        outcomes = iter(planned)
        return answer([next(outcomes) if isinstance(item, kind) else item for item in parsed])

    def describe_acls(
        self, request: pb.DescribeAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeAclsResponse:
        if (disabled := self.authorization.disabled()) is not None:
            return error_answer(pb.DescribeAclsResponse, disabled)
        refused = self.authorization.caller_cluster_refused(context, Operation.DESCRIBE)
        if refused is not None:
            return error_answer(pb.DescribeAclsResponse, refused)
        acl_filter = _parsed(_filter_of, request.filter)
        if isinstance(acl_filter, errors.TidelogError):
            return error_answer(pb.DescribeAclsResponse, acl_filter)
        response = pb.DescribeAclsResponse()
        resources: dict[ResourcePattern, Any] = {}
        for _, binding in self.controller.image.acls.matching(acl_filter):
            pattern, entry = binding.pattern, binding.entry
            resource = resources.get(pattern)
            if resource is None:
                resource = resources[pattern] = response.resources.add(
                    resource_type=pattern.resource_type,
                    resource_name=pattern.name,
                    pattern_type=pattern.pattern_type,
                )
            resource.acls.add(
                principal=entry.principal,
                host=entry.host,
                operation=entry.operation,
                permission_type=entry.permission,
            )
        return response

    async def _change(self, plan: Callable[[], Any], context: grpc.aio.ServicerContext) -> None:
        remaining = context.time_remaining()
        timeout_s = FORWARD_TIMEOUT_S if remaining is None else min(remaining, FORWARD_TIMEOUT_S)
        async with self._changing:
            await self.controller.propose_metadata_records(plan, timeout_s)


def all_failed(method: str, request: Any, exc: errors.TidelogError) -> Any:
    """The answer of a CreateAcls or DeleteAcls that failed as a whole: `exc` for each item."""
    creating = method == "CreateAcls"
    response: Any = pb.CreateAclsResponse() if creating else pb.DeleteAclsResponse()
    results = response.results if creating else response.filter_results
    for _ in request.creations if creating else request.filters:
        results.add(error_code=exc.code, error_message=str(exc))
    return response


_T = TypeVar("_T")


def _parsed(parse: Callable[[Any], _T], message: Any) -> _T | errors.InvalidRequestError:
    try:
        return parse(message)
    except errors.InvalidRequestError as exc:
        return exc


def _code(kind: type[E], value: int, unset: E | None = None) -> E:
    """The enum member of a wire code; `unset` for 0 when the field's comment says so."""
    if value == 0 and unset is not None:
        return unset
    try:
        return kind(value)
    except ValueError:
        raise errors.InvalidRequestError(f"unknown {kind.__name__} code {value}") from None


def _binding_of(creation: pb.AclCreation) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            _code(ResourceType, creation.resource_type),
            creation.resource_name,
            _code(PatternType, creation.resource_pattern_type, PatternType.LITERAL),
        ),
        AccessControlEntry(
            creation.principal,
            _code(Operation, creation.operation),
            _code(Permission, creation.permission_type),
            creation.host or WILDCARD,
        ),
    )


def _filter_of(message: pb.AclFilter) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(
            _code(ResourceType, message.resource_type_filter, ResourceType.ANY),
            message.resource_name_filter if message.HasField("resource_name_filter") else None,
            _code(PatternType, message.pattern_type_filter, PatternType.ANY),
        ),
        AccessControlEntryFilter(
            message.principal_filter if message.HasField("principal_filter") else None,
            _code(Operation, message.operation, Operation.ANY),
            _code(Permission, message.permission_type, Permission.ANY),
            message.host_filter if message.HasField("host_filter") else None,
        ),
    )
