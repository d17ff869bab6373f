"""A consumer's commits of its positions to its group (contract §8): asynchronous commits, the
callbacks of finished ones, and auto-commit.

Auto-commit (on by default, every ``auto_commit_interval_ms``, and on ``close()``) runs inside
``poll()``, as in kafka-python and the Java client: no thread of its own. Callbacks of
asynchronous commits run in the application's thread, inside the consumer's next ``poll()``,
``commit()``, ``commit_async()`` or ``close()`` (Kafka's
``invokeCompletedOffsetCommitCallbacks``), never on the client's loop, where a blocking call
would wait for itself.

Not thread-safe on its own: the consumer's lock guards it.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tidelog.consumer.config import ConsumerConfig
from tidelog.consumer.fetcher import Fetcher
from tidelog.types import OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from tidelog.connections import Connections

log = logging.getLogger("tidelog.consumer")

#: What an asynchronous commit's callback is given: the offsets, and the error or None.
CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], None]
#: Who commits: the member's (id, epoch), or None for a consumer outside a group's membership.
MemberOf = Callable[[], tuple[str, int] | None]


class Commits:
    """The asynchronous commits under way and the auto-commit timer."""

    def __init__(self, connections: Connections, config: ConsumerConfig, fetcher: Fetcher) -> None:
        self.connections = connections
        self.config = config
        self.fetcher = fetcher
        self.auto_commit = config.enable_auto_commit and config.group_id is not None
        self._next_auto_commit = time.monotonic() + config.auto_commit_interval_ms / 1000
        self._auto_commit_future: concurrent.futures.Future[Any] | None = None
        #: Asynchronous commits not yet done, and the callbacks of finished ones, queued
        #: (from the loop thread) for the application's thread.
        self.in_flight: list[concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata]]]
        self.in_flight = []
        self._callbacks: collections.deque[Callable[[], None]] = collections.deque()

    def consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """The positions to commit: every assigned partition that has one."""
        positions = self.fetcher.positions
        offsets = {tp: self.fetcher.position(tp) for tp in positions.offsets}
        return {
            tp: OffsetAndMetadata(position, "", positions.epochs.get(tp))
            for tp, position in offsets.items()
            if position is not None
        }

    def commit_async(
        self,
        group_id: str,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        callback: CommitCallback | None,
        member: MemberOf,
    ) -> concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata]]:
        """Start the commit of `offsets` on the client's loop, without retries; the callback
        waits for `run_callbacks`."""
        coordinators = self.connections.coordinators
        deadline = self.connections.deadline()
        by = member()

        async def commit() -> dict[TopicPartition, OffsetAndMetadata]:
            await coordinators.commit(group_id, offsets, deadline, retry=False, member=by)
            return offsets

        future = self.connections.transport.submit(commit())
        self.in_flight = [f for f in self.in_flight if not f.done()] + [future]
        if callback is not None:
            future.add_done_callback(
                lambda done: self._callbacks.append(
                    lambda: callback(offsets, done.exception())
                )
            )
        return future

    def maybe_auto_commit(self, member: MemberOf) -> None:
        """Commit the positions asynchronously when auto-commit is due, unless the previous
        auto-commit is still under way (a slow coordinator is not sent a pile of them)."""
        if not self.auto_commit or time.monotonic() < self._next_auto_commit:
            return
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
        previous = self._auto_commit_future
        offsets = self.consumed()
        if offsets and (previous is None or previous.done()):
            assert self.config.group_id is not None
            self._auto_commit_future = self.commit_async(
                self.config.group_id, offsets, _log_auto_commit, member
            )

    def run_callbacks(self) -> None:
        """Run the callbacks of the asynchronous commits finished so far, in this thread."""
        while self._callbacks:
            self._callbacks.popleft()()


def _log_auto_commit(
    offsets: dict[TopicPartition, OffsetAndMetadata], error: BaseException | None
) -> None:
    """An auto-commit that failed is only logged: the next one carries newer positions."""
    if error is not None:
        log.warning("auto-commit of %d partition(s) failed: %s", len(offsets), error)
