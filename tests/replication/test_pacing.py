"""Pacing (`tidelog.replication.pacing`): a peer that reports its tick count as often as node
liveness sends, and keeps up, is never taken for lagging; one whose loop falls behind is."""

from __future__ import annotations

from tidelog.replication.pacing import PeerPacing
from tidelog.replication.raft import RaftConfig

CONFIG = RaftConfig(election_ticks=30, heartbeat_ticks=5)


def _lagging_ticks(pacing: PeerPacing, report_every: int, peer_rate: float, ticks: int) -> int:
    """How many of this node's `ticks` found peer 2 lagging, when it reports every
    `report_every` of this node's ticks and runs `peer_rate` ticks for each of this node's."""
    lagging = 0
    for now in range(1, ticks + 1):
        if now % report_every == 0:
            pacing.report(2, int(now * peer_rate), now)
        if 2 in pacing.lagging(now, ()):
            lagging += 1
    return lagging


def test_a_peer_reporting_every_third_of_an_election_timeout_on_time_never_lags() -> None:
    """Reports 10 ticks apart with a heartbeat interval of 5: before, the slack was the
    heartbeat interval, and a peer on time was taken for lagging at the tick before a report
    now and then (5 ticks in 300)."""
    assert _lagging_ticks(PeerPacing(CONFIG, report_ticks=10), 10, 1.0, 300) == 0


def test_a_peer_whose_loop_runs_at_half_speed_lags() -> None:
    assert _lagging_ticks(PeerPacing(CONFIG, report_ticks=10), 10, 0.5, 300) > 100


def test_reports_each_heartbeat_interval_keep_the_heartbeat_interval_as_slack() -> None:
    assert _lagging_ticks(PeerPacing(CONFIG), 5, 1.0, 300) == 0
    assert _lagging_ticks(PeerPacing(CONFIG), 5, 0.5, 300) > 100
