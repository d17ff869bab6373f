"""What the adapters of Kafka's admin APIs share: a change's timeout, which bounds both the
Tidelog handler's wait for the controller and the call's deadline, and Kafka's null error
message."""

from __future__ import annotations

import datetime

from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.fields import millis


def change_timeout_ms(call: KafkaCall, timeout: datetime.timedelta) -> int:
    """The pb request's ``timeout_ms`` for a Kafka request's `timeout`, which also becomes the
    call's deadline; 0 (Kafka's "do not wait", or a negative timeout) leaves Tidelog's
    default wait, as an unset gRPC timeout does: a change is always waited for."""
    timeout_ms = max(0, millis(timeout))
    if timeout_ms:
        call.set_timeout(timeout_ms / 1000)
    return timeout_ms


def error_message(text: str) -> str | None:
    """A Tidelog answer's error message as Kafka sends it: null, not empty, when there is
    none."""
    return text or None
