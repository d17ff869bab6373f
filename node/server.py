"""The node process: a grpc.aio server around a :class:`~node.runtime.NodeRuntime`.

The shell owns what every node needs whatever the runtime does: the data-dir lock, binding,
health (NOT_SERVING until the logs are loaded), reflection, publishing the bound address,
signals, and dying with its launcher. It also wires the runtime's parts to the gRPC services,
so the client API and the runtime never import each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from tidelog.errors import InvalidConfigError
from tidelog.node.config import NodeConfig
from tidelog.v1 import tidelog_pb2

#: Holds an exclusive flock while a node runs, so two nodes never share a data dir and a
#: launcher can tell a running node from a stale pid.
LOCK_FILE = "node.lock"
#: "host:port" the node actually bound, written once it listens (for launchers using port 0).
ADDR_FILE = "node.addr"
TIDELOG_SERVICE = tidelog_pb2.DESCRIPTOR.services_by_name["Tidelog"].full_name

_PARENT_POLL_S = 0.2
#: After the launcher is gone, how long a clean stop may take before the watchdog thread exits
#: the process regardless (the event loop may be the thing that is stuck).
_ORPHAN_DEADLINE_S = 5.0
_SERVER_GRACE_S = 1.0
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>

log = logging.getLogger("tidelog.node")


async def serve(config: NodeConfig, *, exit_with_parent: int | None = None) -> int:
    """Runs one node until SIGTERM/SIGINT (graceful) or until ``exit_with_parent`` is no longer
    this process's parent (immediate). Returns the process exit code."""
    # The runtime is heavy; config errors come first.
    from tidelog.node.api import TidelogServicer
    from tidelog.node.runtime import NodeRuntime
    from tidelog.node.transport import add_raft_transport
    from tidelog.v1 import tidelog_pb2_grpc

    config.data_dir.mkdir(parents=True, exist_ok=True)
    with _hold_data_dir(config.data_dir):
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        try:
            port = server.add_insecure_port(config.listen)
        except RuntimeError:
            raise InvalidConfigError(
                f"cannot listen on {config.listen}: the address is in use or unavailable"
            ) from None
        config = config.bound(port)
        health_servicer = health.aio.HealthServicer()
        for service in (health.OVERALL_HEALTH, TIDELOG_SERVICE):
            await health_servicer.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection(
            [TIDELOG_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME], server
        )
        runtime = NodeRuntime(config)
        tidelog_pb2_grpc.add_TidelogServicer_to_server(
            TidelogServicer(config, runtime.replicas, runtime.routing, runtime.controller), server
        )
        close_inbound = add_raft_transport(
            server, runtime.on_envelope, runtime.controller.fetch_metadata
        )

        stopping = asyncio.Event()
        graceful = True

        def request_stop(is_graceful: bool) -> None:
            nonlocal graceful
            graceful = graceful and is_graceful
            stopping.set()

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, request_stop, True)
        if exit_with_parent is not None:
            _start_parent_watchdog(exit_with_parent, lambda: request_stop(False), loop)

        await server.start()
        addr_path = config.data_dir / ADDR_FILE
        _write_atomically(addr_path, config.listen + "\n")
        log.info("node %d listening on %s", config.node_id, config.listen)
        try:
            await runtime.start()
            for service in (health.OVERALL_HEALTH, TIDELOG_SERVICE):
                await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
            log.info("node %d serving", config.node_id)
            await stopping.wait()
            log.info("node %d stopping (%s)", config.node_id, "graceful" if graceful else "now")
            await health_servicer.enter_graceful_shutdown()
            await runtime.stop(graceful=graceful)
        finally:
            close_inbound()
            await server.stop(_SERVER_GRACE_S if graceful else 0)
            addr_path.unlink(missing_ok=True)
    log.info("node %d stopped", config.node_id)
    return 0


def data_dir_in_use(data_dir: Path) -> bool:
    """Whether a live node holds ``data_dir`` (the lock dies with its process, stale pids don't)."""
    try:
        handle = (data_dir / LOCK_FILE).open("a")
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


@contextlib.contextmanager
def _hold_data_dir(data_dir: Path) -> Iterator[None]:
    with (data_dir / LOCK_FILE).open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InvalidConfigError(
                f"data dir {data_dir} is in use by another running node"
            ) from None
        yield


def _write_atomically(path: Path, text: str) -> None:
    """Readers see the old file or the whole new one, never a torn write."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _start_parent_watchdog(
    parent_pid: int, stop: Callable[[], None], loop: asyncio.AbstractEventLoop
) -> None:
    """Stops the node once ``parent_pid`` is no longer its parent, so a launcher killed with
    SIGKILL (which runs no cleanup) leaves no orphan. A thread rather than a task, so a wedged
    event loop cannot keep an orphan alive: it exits the process after a deadline."""

    if sys.platform == "linux":
        # The kernel's own guarantee: SIGKILL when the launcher dies, even while this process is
        # SIGSTOPped (LocalCluster.pause) and the watchdog thread cannot run. It tracks the
        # launcher *thread* that spawned us, which for launchers is their main thread.
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        # A dead parent re-parents us at once (even while it is an unreaped zombie), which a
        # liveness check of its pid would miss.
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_POLL_S)
        log.warning("launcher %d is gone; stopping", parent_pid)
        loop.call_soon_threadsafe(stop)
        time.sleep(_ORPHAN_DEADLINE_S)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()
