"""A LocalCluster whose every link crosses a proxy of one Toxiproxy server.

Node i reaches node j through proxy ``n{i}-n{j}`` (one per directed pair, so a fault can cut or
slow one direction of one link), and clients reach node j through ``client-n{j}``, which is also
the address every node publishes for j in Metadata and leader hints. The harness itself
(readiness probes, ``leader_of``, the final reads of the checker) dials the nodes directly, so
it sees the cluster even while the nemesis has cut it up.
"""

from __future__ import annotations

import itertools
from typing import Any

from tidelog.chaos.toxiproxy import ToxiproxyClient
from tidelog.testing import LocalCluster, NodeRoutes

__all__ = ["ProxiedCluster", "client_link", "peer_link"]


def peer_link(src: int, dst: int) -> str:
    """The proxy node ``src`` dials to reach node ``dst``."""
    return f"n{src}-n{dst}"


def client_link(node_id: int) -> str:
    """The proxy clients dial to reach ``node_id``."""
    return f"client-n{node_id}"


class ProxiedCluster(LocalCluster):
    """``LocalCluster`` with proxied links; the proxies are created on the first spawn (the
    nodes' own addresses are only known then) and live as long as the Toxiproxy server."""

    def __init__(self, nodes: int, proxies: ToxiproxyClient, **kwargs: Any) -> None:
        super().__init__(nodes, **kwargs)
        self.proxies = proxies
        self._routes: dict[int, NodeRoutes] = {}
        self._client_addresses: dict[int, str] = {}

    def __enter__(self) -> ProxiedCluster:
        super().__enter__()
        return self

    def routes(self, node_id: int) -> NodeRoutes:
        if not self._routes:
            self._create_proxies()
        return self._routes[node_id]

    @property
    def client_bootstrap(self) -> str:
        """What clients bootstrap from: the client proxies, never the nodes themselves."""
        if not self._routes:
            self._create_proxies()
        return ",".join(self._client_addresses[n] for n in self.node_ids)

    def peer_links(self, node_id: int) -> list[str]:
        """Every node-to-node proxy with ``node_id`` at either end."""
        others = [n for n in self.node_ids if n != node_id]
        return [peer_link(node_id, n) for n in others] + [peer_link(n, node_id) for n in others]

    def links_between(self, group: list[int], rest: list[int]) -> list[str]:
        """Both directions of every link from a node of ``group`` to a node of ``rest``."""
        return [peer_link(a, b) for a, b in itertools.product(group, rest)] + [
            peer_link(b, a) for a, b in itertools.product(group, rest)
        ]

    def all_peer_links(self) -> list[str]:
        return [peer_link(a, b) for a, b in itertools.permutations(self.node_ids, 2)]

    def _create_proxies(self) -> None:
        existing = self.proxies.proxies()
        listen: dict[str, str] = {}
        wanted = [
            (peer_link(a, b), self.internal_address_of(b))
            for a, b in itertools.permutations(self.node_ids, 2)
        ]
        wanted += [(client_link(n), self.address_of(n)) for n in self.node_ids]
        for name, upstream in wanted:
            info = existing.get(name) or self.proxies.create_proxy(name, upstream)
            listen[name] = info.listen
        self._client_addresses = {n: listen[client_link(n)] for n in self.node_ids}
        for node_id in self.node_ids:
            peers = {
                n: self.internal_address_of(n) if n == node_id else listen[peer_link(node_id, n)]
                for n in self.node_ids
            }
            self._routes[node_id] = NodeRoutes(peers, dict(self._client_addresses))
