"""The producer, as Kafka's: an accumulator of per-partition batches that ``send()`` fills
(``accumulator``), a sender that drains them to their leaders through the client's
partitioned-request engine (``sender``), and, on by default with acks=all, the idempotence
state that numbers each partition's records so that retries never write a batch twice
(``idempotence``).
"""

from __future__ import annotations

import concurrent.futures
from typing import TYPE_CHECKING

from tidelog.errors import RequestTimedOutError
from tidelog.producer.accumulator import RecordAccumulator, RecordFuture
from tidelog.producer.config import ProducerConfig
from tidelog.producer.idempotence import IdempotenceState
from tidelog.producer.sender import Sender
from tidelog.retry import Deadline

if TYPE_CHECKING:
    from tidelog.client import Client

__all__ = ["Producer", "ProducerConfig", "RecordFuture"]


class Producer(RecordAccumulator):
    """Thread-safe: any number of threads may call send() concurrently. The accumulator is
    the producer's own side (send() is its method, the hot path); the sender runs on the
    client's event loop from construction to close()."""

    def __init__(self, client: Client, config: ProducerConfig) -> None:
        idempotence = IdempotenceState(config.idempotence)
        super().__init__(client, config, idempotence)
        self._sender = Sender(client, self, idempotence)
        self._wake_sender = self._sender.wake
        self._sending = client.transport.submit(self._sender.run())

    def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything queued now, lingering or not, and wait until it is acknowledged or
        failed (the futures say which)."""
        deadline = None if timeout_ms is None else Deadline(timeout_ms)
        with self._cond:
            pending = self.pending()
            self._flushing += 1
            self._wake_sender()
        try:
            for batch in pending:
                if not batch.done.wait(None if deadline is None else deadline.remaining()):
                    raise RequestTimedOutError(f"flush did not complete within {timeout_ms} ms")
        finally:
            with self._cond:
                self._flushing -= 1

    def close(self, timeout_ms: int | None = None) -> None:
        """Deliver what is queued (bounded by `timeout_ms`), then stop the sender; records
        still queued at the timeout fail."""
        with self._cond:
            self.closing = True
            self._wake_sender()
        try:
            self._sending.result(None if timeout_ms is None else timeout_ms / 1000)
        except concurrent.futures.TimeoutError:
            with self._cond:
                self._sender.force_close = True
                self._wake_sender()
            self._sending.result()
        except concurrent.futures.CancelledError:
            pass  # the client was closed first, which failed what was left

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def producer_id(self) -> tuple[int, int]:
        """(producer id, epoch); (-1, -1) before InitProducerId or without idempotence."""
        return self.idempotence.producer_id, self.idempotence.producer_epoch
