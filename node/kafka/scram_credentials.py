"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (51), v0, onto Tidelog's
handlers (node/api/scram_credentials.py): DESCRIBE or ALTER on the cluster, the credentials
kept in the metadata log, Kafka's error codes per user. Kafka's admin clients salt the
password themselves and send the salt and the salted password, as Tidelog's CLI does.
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

DESCRIBE_KEY, ALTER_KEY = 50, 51
_NO_THROTTLE = datetime.timedelta(0)


class ScramCredentialsAdapter:
    def __init__(self, servicer: Any) -> None:
        self._servicer = servicer

    async def describe(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(DESCRIBE_KEY, call.api_version)
        result_type = entity_of(response, "DescribeUserScramCredentialsResult")
        info_type = entity_of(response, "CredentialInfo")
        answer: pb.DescribeUserScramCredentialsResponse = (
            await self._servicer.DescribeUserScramCredentials(
                pb.DescribeUserScramCredentialsRequest(
                    users=[user.name for user in request.users or ()]
                ),
                call,
            )
        )
        return build(
            response, throttle_time=_NO_THROTTLE, error_code=error_code(answer.error_code),
            error_message=error_message(answer.error_message),
            results=tuple(
                build(result_type, user=r.user, error_code=error_code(r.error_code),
                      error_message=error_message(r.error_message),
                      credential_infos=tuple(
                          build(info_type, mechanism=i.mechanism, iterations=i.iterations)
                          for i in r.credential_infos
                      ))
                for r in answer.results
            ),
        )

    async def alter(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(ALTER_KEY, call.api_version)
        result_type = entity_of(response, "AlterUserScramCredentialsResult")
        answer: pb.AlterUserScramCredentialsResponse = (
            await self._servicer.AlterUserScramCredentials(
                pb.AlterUserScramCredentialsRequest(
                    deletions=[
                        pb.ScramCredentialDeletion(name=d.name, mechanism=d.mechanism)
                        for d in request.deletions
                    ],
                    upsertions=[
                        pb.ScramCredentialUpsertion(
                            name=u.name, mechanism=u.mechanism, iterations=u.iterations,
                            salt=u.salt, salted_password=u.salted_password,
                        )
                        for u in request.upsertions
                    ],
                ),
                call,
            )
        )
        return build(response, throttle_time=_NO_THROTTLE, results=tuple(
            build(result_type, user=r.user, error_code=error_code(r.error_code),
                  error_message=error_message(r.error_message))
            for r in answer.results
        ))


def add_scram_credentials(registry: ApiRegistry, servicer: Any) -> None:
    adapter = ScramCredentialsAdapter(servicer)
    registry.add(DESCRIBE_KEY, 0, 0, adapter.describe)
    registry.add(ALTER_KEY, 0, 0, adapter.alter)
