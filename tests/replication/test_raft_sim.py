"""The simulator over a fixed range of seeds, the regression seeds, and checks that the
simulator itself would notice a broken core (a checker that never fails proves nothing)."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from pathlib import Path

import pytest

from tidelog.commands import sim as sim_command
from tidelog.replication import RaftCore, ReadState, Ready, Role, driver, sim
from tidelog.replication.driver import TermVote
from tidelog.replication.lease import ReadLease
from tidelog.replication.messages import PreVoteRequest, VoteRequest

SEEDS = 500
CHUNK = 50
FAULT_TICKS = 120
REGRESSIONS = Path(__file__).with_name("sim_regression_seeds.txt")


def _parse(flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sim_command.configure(parser)
    return parser.parse_args(shlex.split(flags))


def _regression_lines() -> list[str]:
    lines = (line.split("#")[0].strip() for line in REGRESSIONS.read_text().splitlines())
    return [line for line in lines if line]


@pytest.mark.parametrize("first", range(0, SEEDS, CHUNK))
def test_seed_range_holds_every_invariant(first: int) -> None:
    """Even seeds use the default fault mix, odd seeds swarm mode; membership changes are
    among the faults (and must commit in every chunk, or they were not tested)."""
    failures = []
    conf_commits = 0
    for seed in range(first, first + CHUNK):
        args = _parse(f"--seed {seed} --ticks {FAULT_TICKS}" + (" --swarm" if seed % 2 else ""))
        result = sim_command.run_one(seed, args)
        conf_commits += result.conf_commits
        if not result.ok:
            failures.append(f"{sim_command.replay_command(seed, args)}: {result.failure}")
    assert not failures, "\n".join(failures)
    assert conf_commits > 0


@pytest.mark.parametrize("line", _regression_lines())
def test_regression_seed(line: str) -> None:
    seed, *flags = line.split()
    args = _parse(f"--seed {seed} {' '.join(flags)}")
    result = sim_command.run_one(int(seed), args)
    assert result.ok, f"{sim_command.replay_command(int(seed), args)}: {result.failure}"


def test_one_seed_replays_identically() -> None:
    a = sim.run_seed(7, swarm=True)
    b = sim.run_seed(7, swarm=True)
    assert (a.events, a.ticks, a.acked, a.reads, a.failovers) == (
        b.events, b.ticks, b.acked, b.reads, b.failovers)
    assert a.ok and a.acked > 0 and a.reads > 0 and a.failovers


def _first_failure(swarm: bool, limit: int = 60) -> str:
    for seed in range(limit):
        result = sim.run_seed(seed, swarm=swarm, fault_ticks=FAULT_TICKS)
        if not result.ok:
            return result.failure
    return ""


def test_simulator_catches_a_core_that_votes_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    vote = RaftCore._handle_vote_request

    def forgetful(self: RaftCore, m: PreVoteRequest | VoteRequest) -> None:
        self._vote = None
        self._leader = None
        vote(self, m)

    monkeypatch.setattr(RaftCore, "_handle_vote_request", forgetful)
    assert "two leaders in term" in _first_failure(swarm=True)


def test_simulator_catches_a_core_that_ignores_log_freshness(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale voter wins only when the leader is gone and it campaigns before the fresh ones
    (leases refuse it otherwise), so few runs show it: 1-8 of the first 60 swarm seeds, which
    a core change that only sent fewer messages cut from 4 to 1, and 7-10 of the first 60
    default-mix seeds over three versions of the core (measured when the commit's empty
    appends went). The default mix, also cheaper per seed, leaves a 60-seed search a chance of
    about 1 in 2,000 or less to miss it, whatever the trajectories."""
    vote = RaftCore._handle_vote_request

    def careless(self: RaftCore, m: PreVoteRequest | VoteRequest) -> None:
        object.__setattr__(m, "last_epoch", 1 << 40)  # every candidate looks up to date
        vote(self, m)

    monkeypatch.setattr(RaftCore, "_handle_vote_request", careless)
    failure = _first_failure(swarm=False)
    assert "leader completeness" in failure or "committed" in failure


def test_simulator_catches_a_follower_that_acknowledges_before_its_fsync(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's subtlest rule, planted wrong: a follower's acknowledgements leave before
    its write is durable. The CI seeds (as `test_seed_range_holds_every_invariant` runs them)
    must catch it; at the time of writing the very first seed does."""
    leader_only = driver.may_send_before_sync

    def hasty(rd: Ready, stored: TermVote) -> bool:
        return rd.role is Role.FOLLOWER or leader_only(rd, stored)

    monkeypatch.setattr(driver, "may_send_before_sync", hasty)
    for seed in range(SEEDS):
        result = sim.run_seed(seed, swarm=bool(seed % 2), fault_ticks=FAULT_TICKS)
        if not result.ok:
            assert any(sign in result.failure for sign in (
                "durable logs hold", "lost", "beyond its durable log end")), result.failure
            return
    pytest.fail("no CI seed noticed acknowledgements sent before the fsync")


def _first_ci_failure(start: int = 0) -> str:
    """The failure of the first of the CI seeds from `start` (as
    `test_seed_range_holds_every_invariant` runs them) that fails; "" when none does."""
    for seed in range(start, SEEDS):
        result = sim.run_seed(seed, swarm=bool(seed % 2), fault_ticks=FAULT_TICKS)
        if not result.ok:
            return f"seed {seed}: {result.failure}"
    return ""


def test_simulator_catches_reads_answered_without_a_quorum_round(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader that answers a read at its HW without asking a quorum whether it still leads
    serves stale reads once deposed. Swarm seeds, whose fault mixes vary, find it soonest: at
    the time of writing seed 37 of `tidelog sim --swarm` catches it (54 before followers
    learnt the HW from appends and heartbeats alone, 49 with the first half of that change),
    and seed 476 was the first of the CI seeds (since membership changes joined the
    simulator's schedule; 118 before), which would cost this test a minute of CI. It is rare
    and its first seed moves with any change of the core's messages: a search that needs
    fewer seeds would be worth finding."""

    def immediate(self: RaftCore, ctxs: Sequence[int]) -> None:
        self._read_states.extend(ReadState(ctx, self._hw) for ctx in ctxs)

    monkeypatch.setattr(RaftCore, "_register_reads", immediate)
    failure = _first_failure(swarm=True, limit=150)
    # Found as a stale read, or as a read answered by a leader deposed meanwhile (the lease
    # check, which sees it first since fortified groups ask about a stall only after
    # `stall_timeouts`).
    assert "linearizability" in failure or "lease:" in failure, \
        f"no swarm seed noticed a read without a quorum round: {failure}"


def test_simulator_catches_reads_served_before_the_first_commit_of_the_term(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new leader that serves reads before its HW reaches its log end at election answers
    below what its predecessor committed (seed 2 catches it at the time of writing)."""
    read_index = RaftCore.read_index

    def early(self: RaftCore, ctx: int) -> None:
        self._read_floor = 0
        read_index(self, ctx)

    monkeypatch.setattr(RaftCore, "read_index", early)
    failure = _first_ci_failure()
    assert "linearizability" in failure, "no CI seed noticed a read served too early"


def test_simulator_catches_a_follower_that_campaigns_while_its_leaders_node_is_heard(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Fortified, a follower's election timer stands still while its leader's node is heard
    (`RaftCore._supports`). Planted wrong, its timer runs as without fortification, and it
    stands against a leader that leads on (seed 0 of the CI seeds catches it at the time of
    writing)."""
    monkeypatch.setattr(RaftCore, "_supports", lambda self: False)
    failure = _first_ci_failure()
    assert "fortification" in failure, "no CI seed noticed a follower campaigning"


def test_simulator_catches_a_leader_serving_reads_after_its_nodes_liveness_lapsed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A lease that holds for as long as the replica leads its term, not for a bounded
    time after a confirmed round: a leader whose process was stopped (its node unheard, so
    the others elected a new leader) answers reads from its stale HW when it runs again.
    Rare: it takes a pause long enough for an election, a read asked meanwhile and answered
    from the lease. Seed 4 of the CI seeds caught it before leaders stopped asking followers
    whose answers flow; seed 311 is the first that does at the time of writing. Searching
    from seed 0 costs about 30 s of CPU (over two minutes of a loaded CI run), so the search
    starts at seed 300: it still has to find the bug among the CI seeds, in eleven of them. A
    search that needs fewer seeds would be worth finding."""

    def unbounded(self: ReadLease, core: RaftCore, now: float) -> bool:
        return (core.role is Role.LEADER and core.term == self._term
                and not core.transferred_this_term)

    monkeypatch.setattr(ReadLease, "holds", unbounded)
    failure = _first_ci_failure(start=300)
    assert "lease" in failure, "no CI seed noticed reads served past the lease"


def test_simulator_catches_a_membership_change_made_while_another_is_pending(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the one-pending rule a leader moves its voter set two changes from the
    committed one, and two majorities become possible (seed 7 of the CI seeds catches it at
    the time of writing)."""
    monkeypatch.setattr(RaftCore, "conf_change_pending", property(lambda self: False))
    failure = _first_ci_failure()
    assert "never two majorities" in failure, "no CI seed noticed two changes pending"


def test_cli_prints_parameters_and_the_replay_command(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_command.run(_parse("--seed 5 --ticks 60")) == 0
    out = capsys.readouterr().out
    assert "seed=5" in out and "election_ticks=" in out and "drop_rate=" in out
    assert "conf_commits=" in out

    real_run_seed = sim.run_seed

    def broken(seed: int, **_: object) -> sim.SimResult:
        result = real_run_seed(seed, fault_ticks=20)
        result.ok, result.failure = seed != 3, "injected"
        return result

    monkeypatch.setattr(sim, "run_seed", broken)
    assert sim_command.run(_parse("--seeds 2:5 --swarm")) == 1
    out = capsys.readouterr().out
    assert "seed 3 FAILED: injected" in out
    assert "replay: tidelog sim --seed 3 --swarm" in out
    assert "seeds=3 failures=1" in out
