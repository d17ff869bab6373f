"""Peers hang up on a node once it is unregistered.

Before: every peer kept its links to the node (its Raft link and its liveness beacon's)
dialing the node's address for as long as the peer ran, and warned every 30 s that the link
broke. A listener on the unregistered node's address sees the dials: they must stop.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tidelog import Client
from tidelog.errors import InvalidRequestError
from tidelog.testing import LocalCluster, wait_for

pytestmark = pytest.mark.timeout(240)

#: Longer than a link's longest pause between dials (its gRPC channel's 1 s reconnect backoff).
_QUIET_S = 5.0


@contextmanager
def dials_to(address: str) -> Iterator[list[float]]:
    """A TCP listener at `address` that accepts and drops every connection; yields the
    monotonic times of the connections."""
    host, port = address.rsplit(":", 1)
    server = socket.create_server((host, int(port)), reuse_port=False)
    server.settimeout(0.2)
    seen: list[float] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            seen.append(time.monotonic())
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()
        server.close()


def test_peers_stop_dialing_an_unregistered_node() -> None:
    with LocalCluster(3) as cluster, Client(cluster.bootstrap) as client:
        leaving = cluster.join()
        address = cluster.internal_address_of(leaving)
        client.admin.decommission_node(leaving)
        cluster.stop(leaving)
        with dials_to(address) as dials:
            # Stopped but registered, it is still dialed (the listener sees the dials).
            wait_for(lambda: len(dials) >= 2, 30, "the peers to dial the stopped node")

            def unregistered() -> bool:
                try:
                    client.admin.unregister_node(leaving)
                except InvalidRequestError:  # not fenced yet
                    return False
                return True

            wait_for(unregistered, 60, f"node {leaving} unregistered")
            wait_for(lambda: time.monotonic() - dials[-1] >= _QUIET_S, 60,
                     f"{_QUIET_S} s without a dial to the unregistered node")
