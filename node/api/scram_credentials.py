"""AlterUserScramCredentials and DescribeUserScramCredentials: users' SCRAM credentials in the
metadata log, as Kafka keeps them in KRaft (the credentials SASL checks on the Kafka listener,
node/kafka/sasl.py).

Changes go through the controller leader (any node forwards them there), which checks ALTER
on the cluster, plans the records (coordinator/scram_credentials.py) and commits them; every
node applies them. One change at a time on a node, so that each plan sees the previous one's
credentials. Describe needs DESCRIBE on the cluster and is answered by any node from the
credentials it has applied: mechanisms and iterations, never a salt or a key.
"""

from __future__ import annotations

from typing import Any

import grpc

from tidelog import errors
from tidelog.acl import Operation
from tidelog.coordinator import scram_credentials
from tidelog.coordinator.scram_credentials import ScramDeletion, ScramUpsertion
from tidelog.node.api.controller_api import ControllerApi
from tidelog.node.api.forwarding import at_controller, change_timeout_s
from tidelog.node.api.rules import error_answer
from tidelog.v1 import tidelog_pb2 as pb


class ScramCredentialsApi(ControllerApi):
    def failed(self, method: str, request: Any, exc: errors.TidelogError) -> Any:
        return all_failed(request, exc)

    @at_controller("AlterUserScramCredentials")
    async def alter(
        self, request: pb.AlterUserScramCredentialsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AlterUserScramCredentialsResponse:
        refused = self.authorization.caller_cluster_refused(context, Operation.ALTER)
        if refused is not None:
            return all_failed(request, refused)
        deletions = [ScramDeletion(d.name, d.mechanism) for d in request.deletions]
        upsertions = [
            ScramUpsertion(u.name, u.mechanism, u.iterations, u.salt, u.salted_password)
            for u in request.upsertions
        ]
        outcomes: dict[str, errors.TidelogError | None] = {}

        def plan() -> list[scram_credentials.ScramRecord]:
            records, planned = scram_credentials.plan_alter(
                self.controller.image.scram_credentials, deletions, upsertions
            )
            outcomes.clear()
            outcomes.update(planned)
            return records

        try:
            async with self._changing:
                await self.controller.propose_metadata_records(plan, change_timeout_s(request))
        except errors.TidelogError as exc:
            return all_failed(request, exc)
        response = pb.AlterUserScramCredentialsResponse()
        for user, error in outcomes.items():
            response.results.add(
                user=user, error_code=error.code if error else 0,
                error_message=str(error) if error else "",
            )
        return response

    def describe(
        self, request: pb.DescribeUserScramCredentialsRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.DescribeUserScramCredentialsResponse:
        refused = self.authorization.caller_cluster_refused(context, Operation.DESCRIBE)
        if refused is not None:
            return error_answer(pb.DescribeUserScramCredentialsResponse, refused)
        stored = self.controller.image.scram_credentials
        users = list(request.users) or sorted(stored)
        response = pb.DescribeUserScramCredentialsResponse()
        for user in dict.fromkeys(users):
            result = response.results.add(user=user)
            if users.count(user) > 1:
                error: errors.TidelogError = errors.DuplicateResourceError(
                    "Cannot describe SCRAM credentials for the same user twice in a single "
                    "request"
                )
            elif user not in stored:
                error = errors.ResourceNotFoundError(
                    "Attempt to describe a user credential that does not exist"
                )
            else:
                for mechanism, credential in sorted(stored[user].items()):
                    result.credential_infos.add(
                        mechanism=mechanism, iterations=credential.iterations
                    )
                continue
            result.error_code, result.error_message = error.code, str(error)
        return response


def all_failed(
    request: pb.AlterUserScramCredentialsRequest, exc: errors.TidelogError
) -> pb.AlterUserScramCredentialsResponse:
    """An AlterUserScramCredentials that failed as a whole: `exc` for each user it names."""
    response = pb.AlterUserScramCredentialsResponse()
    names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    for user in dict.fromkeys(names):
        response.results.add(user=user, error_code=exc.code, error_message=str(exc))
    return response
