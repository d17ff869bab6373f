"""`RaftCore.tick` says whether a driver must look at the core after it: the node ticks only
awake cores but skips every further pass (prompt messages, the Ready loop) over those whose
tick only counted, so thousands of groups electing at once cost one pass a tick, not three."""

from __future__ import annotations

import random

from raft_helpers import Cluster

from tidelog.replication.messages import Message


def test_a_tick_that_only_counts_leaves_nothing_to_drive() -> None:
    rng = random.Random(7)
    c = Cluster(3, quiesce=True)
    counted = acted = 0
    cut: int | None = None
    for step in range(1500):
        if step % 200 == 0:  # now and then a node cut off for a while: elections
            cut = rng.choice(c.ids) if cut is None else None
        c.settle(drop=lambda m, cut=cut: m.src == cut or m.dst == cut or rng.random() < 0.15)
        for i in c.ids:
            core = c.cores[i]
            assert not core.has_ready()
            if core.tick():
                acted += 1
                continue
            counted += 1
            prompt: list[Message] = core.take_prompt_messages()
            assert not core.has_ready() and not prompt, f"node {i}: a tick said it only counted"
        if rng.random() < 0.02:
            leader = next((i for i in c.ids if c.cores[i].role.name == "LEADER"), None)
            if leader is not None:
                c.propose(leader, [b"x"], drop=lambda m: rng.random() < 0.15)
    assert counted > 1000 and acted > 100, (counted, acted)  # both kinds were checked
