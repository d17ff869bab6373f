"""What a subscribed consumer does for its group membership (KIP-848; the member itself, its
heartbeats and its reconciliation state, is `tidelog.membership.Membership`): join and leave,
and, inside ``poll()``, the work the membership asks of the application: with auto-commit on,
commit the partitions about to be revoked, run the listener's callbacks, and install the new
assignment.

Not thread-safe on its own: the consumer's lock guards it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tidelog.consumer.commits import Commits
from tidelog.consumer.config import ConsumerConfig
from tidelog.consumer.fetcher import Fetcher
from tidelog.errors import StaleMemberEpochError, TidelogError
from tidelog.lookups import topic_names
from tidelog.membership import ConsumerRebalanceListener, Membership
from tidelog.types import TopicPartition

if TYPE_CHECKING:
    from tidelog.connections import Connections

log = logging.getLogger("tidelog.consumer")


class Group:
    """The consumer's membership of `subscribe()`, if any, and its rebalance listener."""

    def __init__(
        self, connections: Connections, config: ConsumerConfig, fetcher: Fetcher, commits: Commits
    ) -> None:
        self.connections = connections
        self.config = config
        self.fetcher = fetcher
        self.commits = commits
        #: The group membership of `subscribe()`; None while partitions are assigned by hand.
        self.membership: Membership | None = None
        self.listener = ConsumerRebalanceListener()

    def join(
        self,
        group_id: str,
        topics: list[str] | None,
        pattern: str | None,
        listener: ConsumerRebalanceListener | None,
    ) -> None:
        """Become a member subscribed to `topics` (or `pattern`), leaving any membership
        first."""
        if self.membership is not None:
            self.leave()
        self.listener = listener or ConsumerRebalanceListener()
        self.membership = Membership(
            self.connections, group_id, topics, pattern,
            instance_id=self.config.group_instance_id,
            rebalance_timeout_ms=self.config.max_poll_interval_ms,
            server_assignor=self.config.group_remote_assignor,
        )
        self.membership.refresh_pattern(self._topic_names)

    def _topic_names(self) -> list[str]:
        return topic_names(self.connections, self.connections.deadline())

    def leave(self) -> None:
        """Give the partitions up (committed and revoked, or lost if the membership lost
        them) and leave the group at once."""
        membership = self.membership
        assert membership is not None
        owned = set(self.fetcher.positions.offsets)
        try:
            if owned and (membership.lost or membership.fatal is not None):
                self.listener.on_partitions_lost(owned)
            elif owned:
                self._commit_revoked(owned)
                self.listener.on_partitions_revoked(owned)
        finally:
            self.fetcher.assign(())
            self.membership = None
            membership.leave(self.connections.deadline().remaining())

    def reconcile(self) -> None:
        """Do what the membership asks of the application (`membership.Membership`)."""
        membership = self.membership
        if membership is None:
            return
        membership.refresh_pattern(self._topic_names)
        work = membership.take_work()
        if work is None:
            return
        kind, revoked, added = work
        positions = self.fetcher.positions
        if kind == "lost":
            if revoked:
                self.listener.on_partitions_lost(revoked)
            self.fetcher.assign(())
        else:
            if revoked:  # committed and revoked while still assigned, as in Kafka
                self._commit_revoked(revoked)
                self.listener.on_partitions_revoked(revoked)
                self.fetcher.assign(tp for tp in positions.offsets if tp not in revoked)
            self.fetcher.assign([*positions.offsets, *sorted(added)])
            self.listener.on_partitions_assigned(added)
        membership.done(kind, revoked, added)

    def _commit_revoked(self, revoked: set[TopicPartition]) -> None:
        """With auto-commit on, the positions of partitions about to be revoked, committed
        before they go (a failure is logged and the revocation goes on, as in Kafka)."""
        membership = self.membership
        if not self.commits.auto_commit or membership is None:
            return
        offsets = {tp: o for tp, o in self.commits.consumed().items() if tp in revoked}
        if not offsets:
            return
        assert self.config.group_id is not None
        for attempt in range(2):  # STALE_MEMBER_EPOCH: again with the newer epoch, once
            try:
                self.connections.run(self.connections.coordinators.commit(
                    self.config.group_id, offsets, self.connections.deadline(),
                    member=membership.member(),
                ))
                return
            except StaleMemberEpochError:
                if attempt:
                    raise
            except TidelogError as exc:
                log.warning("the commit of revoked partitions failed: %s", exc)
                return

    def member(self) -> tuple[str, int] | None:
        """What a commit carries: the member's id and epoch, or None outside a membership."""
        return self.membership.member() if self.membership is not None else None

    def joined_member(self) -> tuple[str, int] | None:
        """What an OffsetFetch carries: the member's id and epoch once it has joined (as the
        Java consumer, which sends them only with a member epoch); before, none, which the
        coordinator does not check."""
        member = self.member()
        return member if member is not None and member[1] > 0 else None
