"""Consistent reads (contract §8, contract §8.3): an old group coordinator never answers a
stale offset, whether it was paused (SIGSTOP: it wakes believing it still leads) or cut off
from its peers while clients still reach it (every peer link refused, or a black hole that
keeps connections open and drops every byte). Its successor commits a newer offset; the old
one, asked directly, before and right after the fault heals, answers an error or the newer
offset, never the older one. Requests sent as forwarded ones (in an envelope, to its
node-to-node listener) make it answer itself rather than forward. The "any node, after an
acknowledgement" half runs in the chaos suite (tests/project/test_chaos.py, the coordinator
scenario), whose checker verifies every fetch."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import pytest
from offsets_helpers import Committed, ForwardedAnswer, committed, coordinator, find, forwarded

from tidelog.chaos.cluster import ProxiedCluster
from tidelog.chaos.toxiproxy import start_toxiproxy
from tidelog.testing import Raw, wait_for
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(180)

TOPIC = "events"
GROUP = "watched"
#: Requests sent to the old coordinator each time: half as forwarded ones.
ASKED = 20


@pytest.fixture
def proxied() -> Iterator[tuple[ProxiedCluster, Raw]]:
    with start_toxiproxy(seed=1) as server, server.client() as proxies, ProxiedCluster(
        3, proxies, offsets_topic_num_partitions=1
    ) as cluster, Raw(cluster) as raw:
        yield cluster, raw


@pytest.fixture
def internal(proxied: tuple[ProxiedCluster, Raw]) -> Iterator[dict[int, grpc.Channel]]:
    """A channel to each node's own node-to-node listener (no proxy between), for the
    requests sent as forwarded ones."""
    cluster, _ = proxied
    channels = {n: grpc.insecure_channel(cluster.internal_address_of(n))
                for n in cluster.node_ids}
    yield channels
    for channel in channels.values():
        channel.close()


def fault(cluster: ProxiedCluster, kind: str, node: int) -> Callable[[], None]:
    """Start `kind` on `node`; returns what heals it."""
    if kind == "pause":
        cluster.pause(node)
        return lambda: cluster.resume(node)
    links = cluster.peer_links(node)
    for link in links:
        if kind == "refuse":
            cluster.proxies.disable(link)
        else:
            for stream in ("upstream", "downstream"):
                cluster.proxies.add_toxic(link, "timeout", name=f"cut_{stream}", stream=stream,
                                          attributes={"timeout": 0})

    def heal() -> None:
        for link in links:
            cluster.proxies.enable(link)
            for toxic in cluster.proxies.toxics(link):
                cluster.proxies.remove_toxic(link, toxic.name)

    return heal


def answered(future: grpc.Future | ForwardedAnswer) -> pb.OffsetFetchResponse | None:
    """The answer, or None when the call failed (no answer is never a stale one)."""
    try:
        response: pb.OffsetFetchResponse = future.result()
    except grpc.RpcError:
        return None
    return response


def test_an_old_coordinator_paused_or_cut_off_never_answers_a_stale_offset(
    proxied: tuple[ProxiedCluster, Raw], internal: dict[int, grpc.Channel],
) -> None:
    cluster, raw = proxied
    wait_for(lambda: find(raw, 1, "warm-up").error_code == 0, 60, "the offsets topic")
    raw.create_topic(TOPIC, 1, 3)
    request = pb.OffsetFetchRequest(
        group_id=GROUP, topics=[pb.OffsetFetchTopic(name=TOPIC, partitions=[0])]
    )
    value = 0
    for kind in ("pause", "blackhole", "refuse"):
        old = coordinator(raw, GROUP, cluster.node_ids)
        value += 1
        committed(raw, old, GROUP, {(TOPIC, 0): Committed(value)})
        others = [n for n in cluster.node_ids if n != old]
        heal = fault(cluster, kind, old)
        try:
            new = coordinator(raw, GROUP, others, but=old)
            value += 1
            committed(raw, new, GROUP, {(TOPIC, 0): Committed(value)})
            # Sent while the fault holds: a paused node answers them as it wakes, a cut-off
            # one at once (it still reaches clients), without its peers.
            waiting = [ask(raw, internal, old, request, marked=i % 2 == 0)
                       for i in range(ASKED)]
            during = [answered(f) for f in waiting] if kind != "pause" else []
        finally:
            heal()
        after = [answered(f) for f in waiting] if kind == "pause" else []
        after += [answered(ask(raw, internal, old, request, marked=i % 2 == 0))
                  for i in range(ASKED)]
        for answer in during + after:
            if answer is None or answer.error_code:
                continue
            offsets = [p.committed_offset for t in answer.topics for p in t.partitions]
            assert offsets == [value], (kind, old, new, offsets, f"stale: {value - 1}")
        coordinator(raw, GROUP, cluster.node_ids)  # settled before the next fault


def ask(
    raw: Raw, internal: dict[int, grpc.Channel], node: int, request: pb.OffsetFetchRequest,
    *, marked: bool,
) -> grpc.Future | ForwardedAnswer:
    """`node`'s answer to `request`: sent by a client, or `marked`, as a forwarded one."""
    if marked:
        return forwarded(internal[node], "OffsetFetch", request, 10)
    future: grpc.Future = raw.stub(node).OffsetFetch.future(request, timeout=10)
    return future
