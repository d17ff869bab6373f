"""Our thin layer over the toxiproxy-python client, and a launcher for a Toxiproxy server.

The client (toxiproxy-python 0.1.1) makes its HTTP calls with no timeout, so one hung server
(Toxiproxy has known hangs when toxics are removed under load) would block a chaos run forever;
it keeps the API host and port in process-global class attributes; and it cannot update a toxic.
``ToxiproxyClient`` fixes all three without forking it: each call runs with the client bound to
this instance's endpoint and to a ``requests`` stand-in that adds a timeout, under one lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import toxiproxy
import toxiproxy.api as toxiproxy_api
from toxiproxy.api import APIConsumer, validate_response
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists
from toxiproxy.toxic import Toxic

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "InvalidToxic",
    "NotFound",
    "ProxyExists",
    "ProxyInfo",
    "ToxicInfo",
    "ToxiproxyClient",
    "ToxiproxyError",
    "ToxiproxyHandle",
    "start_toxiproxy",
]

DEFAULT_TIMEOUT_S = 5.0
#: How long start_toxiproxy waits for a fresh server to answer.
_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0
_REPO = Path(__file__).resolve().parent.parent
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>

#: Serialises every call through the client, whose endpoint is process-global.
_CLIENT_LOCK = threading.RLock()


class ToxiproxyError(Exception):
    """The server answered with a status the client does not turn into an exception (5xx, 403,
    405): left alone, the client would go on and fail on the error body instead."""


@dataclass(frozen=True)
class ProxyInfo:
    name: str
    listen: str
    upstream: str
    enabled: bool

    @property
    def address(self) -> tuple[str, int]:
        """Where clients connect: ``listen`` as a (host, port) pair."""
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


@dataclass(frozen=True)
class ToxicInfo:
    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, int]


class _TimedRequests:
    """Stands in for the ``requests`` module inside ``toxiproxy.api`` during one of our calls:
    same get/post/delete signatures, through our session, with a default timeout."""

    def __init__(self, session: requests.Session, timeout: float) -> None:
        self._session = session
        self._timeout = timeout

    def get(self, url: str, params: Any = None, **kwargs: Any) -> requests.Response:
        return self.send("GET", url, params=params, **kwargs)

    def post(self, url: str, data: Any = None, json: Any = None,
             **kwargs: Any) -> requests.Response:
        return self.send("POST", url, data=data, json=json, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> requests.Response:
        return self.send("DELETE", url, **kwargs)

    def send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", self._timeout)
        response = self._session.request(method, url, **kwargs)
        if response.status_code >= 400 and response.status_code not in (400, 404, 409):
            raise ToxiproxyError(f"{method} {url}: {response.status_code} {response.text}")
        return response


def _proxy_handle(name: str) -> toxiproxy.Proxy:
    """A client-side Proxy that only carries a name: its methods use nothing else, and the
    server answers 404 for a name it does not know."""
    return toxiproxy.Proxy(name=name, upstream="", enabled=False, listen="")


def _proxy_info(proxy: toxiproxy.Proxy) -> ProxyInfo:
    return ProxyInfo(proxy.name, proxy.listen, proxy.upstream, proxy.enabled)


def _toxic_info(toxic: Toxic) -> ToxicInfo:
    return ToxicInfo(toxic.name, toxic.type, toxic.stream, float(toxic.toxicity),
                     dict(toxic.attributes))


class ToxiproxyClient:
    """One Toxiproxy API endpoint. Errors surface as the client's exceptions (``NotFound``,
    ``ProxyExists`` for any 409, ``InvalidToxic`` for any 400, each carrying the response body)
    or as ``ToxiproxyError``; a call that outlives ``timeout`` raises ``requests.Timeout``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8474, *,
                 timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.host = host
        self.port = port
        self._session = requests.Session()
        self._session.trust_env = False  # a proxy from the environment must not see loopback
        self._requests = _TimedRequests(self._session, timeout)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @contextlib.contextmanager
    def _bound(self) -> Iterator[toxiproxy.Toxiproxy]:
        with _CLIENT_LOCK:
            saved = APIConsumer.host, APIConsumer.port, toxiproxy_api.requests
            APIConsumer.host, APIConsumer.port = self.host, self.port
            toxiproxy_api.requests = self._requests
            try:
                yield toxiproxy.Toxiproxy()
            finally:
                APIConsumer.host, APIConsumer.port, toxiproxy_api.requests = saved

    def version(self) -> str:
        with self._bound():
            response = self._requests.get(f"{self.base_url}/version")
        return str(response.json()["version"])

    def reset(self) -> None:
        """Re-enables every proxy and removes every toxic."""
        with self._bound() as client:
            client.reset()

    def create_proxy(self, name: str, upstream: str, listen: str = "127.0.0.1:0",
                     enabled: bool = True) -> ProxyInfo:
        with self._bound() as client:
            return _proxy_info(client.create(upstream=upstream, name=name, listen=listen,
                                             enabled=enabled))

    def proxies(self) -> dict[str, ProxyInfo]:
        with self._bound() as client:
            return {name: _proxy_info(proxy) for name, proxy in client.proxies().items()}

    def get_proxy(self, name: str) -> ProxyInfo:
        with self._bound() as client:
            proxy = client.get_proxy(name)
        if proxy is None:
            raise NotFound(f"proxy {name} not found")
        return _proxy_info(proxy)

    def delete_proxy(self, name: str) -> None:
        with self._bound():
            _proxy_handle(name).destroy()

    def enable(self, name: str) -> None:
        with self._bound():
            _proxy_handle(name).enable()

    def disable(self, name: str) -> None:
        """Stops listening (new connects are refused) and closes every live connection."""
        with self._bound():
            _proxy_handle(name).disable()

    def add_toxic(self, proxy: str, type: str, *, name: str | None = None,
                  stream: str = "downstream", toxicity: float = 1.0,
                  attributes: dict[str, int] | None = None) -> ToxicInfo:
        name = name or f"{type}_{stream}"
        with self._bound():
            handle = _proxy_handle(proxy)
            handle.add_toxic(type=type, name=name, stream=stream, toxicity=toxicity,
                             attributes=attributes or {})
            toxic = handle.get_toxic(name)
        if toxic is None:
            raise NotFound(f"toxic {name} vanished right after it was added to {proxy}")
        return _toxic_info(toxic)

    def update_toxic(self, proxy: str, name: str, *, attributes: dict[str, int] | None = None,
                     toxicity: float | None = None) -> ToxicInfo:
        """The client has no update call: PATCH it ourselves. Attributes merge into the toxic's
        current ones; the server redraws the toxicity on every live link."""
        body: dict[str, Any] = {"attributes": attributes or {}}
        if toxicity is not None:
            body["toxicity"] = toxicity
        with self._bound():
            response = validate_response(self._requests.send(
                "PATCH", f"{self.base_url}/proxies/{proxy}/toxics/{name}", json=body))
        return _toxic_info(Toxic(**response.json()))

    def remove_toxic(self, proxy: str, name: str) -> None:
        with self._bound():
            _proxy_handle(proxy).destroy_toxic(name)

    def toxics(self, proxy: str) -> list[ToxicInfo]:
        """Upstream chain first, then downstream, each in the order the toxics were added."""
        with self._bound():
            return [_toxic_info(t) for t in _proxy_handle(proxy).toxics().values()]

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> ToxiproxyClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass
class ToxiproxyHandle:
    """A running Toxiproxy server process; ``close()`` stops it and reaps it."""

    host: str
    port: int
    process: subprocess.Popen[bytes]
    #: "go" for a toxiproxy-server binary found on PATH, "python" for chaos.toxiproxy_server.
    kind: str

    def client(self, *, timeout: float = DEFAULT_TIMEOUT_S) -> ToxiproxyClient:
        return ToxiproxyClient(self.host, self.port, timeout=timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> ToxiproxyHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn asking the kernel to SIGKILL the server when we die, so even a SIGKILLed
    test run leaves no server behind. libc is resolved here, before the fork."""
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read_line(process: subprocess.Popen[bytes], deadline: float) -> bytes:
    assert process.stdout is not None
    line = b""
    while b"\n" not in line:
        ready, _, _ = select.select([process.stdout], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            raise TimeoutError("toxiproxy server did not report its port in time")
        data = os.read(process.stdout.fileno(), 256)  # unbuffered: select sees the rest
        if not data:
            raise RuntimeError(f"toxiproxy server exited with {process.wait()} before listening")
        line += data
    return line.partition(b"\n")[0]


def _wait_until_answering(handle: ToxiproxyHandle, deadline: float) -> None:
    with handle.client(timeout=1.0) as client:
        while True:
            try:
                client.version()
                return
            except (requests.ConnectionError, requests.Timeout):
                if handle.process.poll() is not None or time.monotonic() > deadline:
                    raise
            time.sleep(0.05)  # polling a condition: the server is not up yet


def start_toxiproxy(seed: int) -> ToxiproxyHandle:
    """Starts a Toxiproxy server on a free loopback port: ``toxiproxy-server`` from PATH when
    there is one (note that Go's server does not actually use its seed), else our asyncio server
    in a subprocess, so proxying never competes with the test for the GIL."""
    deadline = time.monotonic() + _START_TIMEOUT_S
    binary = shutil.which("toxiproxy-server")
    if binary is None:
        process = subprocess.Popen(
            [sys.executable, "-m", "tidelog.chaos.toxiproxy_server", "--host", "127.0.0.1",
             "--port", "0", "--seed", str(seed)],
            cwd=_REPO, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent(),
        )
        handle = ToxiproxyHandle("127.0.0.1", 0, process, "python")
        try:
            address = _read_line(process, deadline).decode().split()[-1]
            handle.port = int(address.rpartition(":")[2])
            return handle
        except BaseException:
            handle.close()
            raise
    port = _free_port()  # Go's server cannot report a port it picked itself
    process = subprocess.Popen(
        [binary, "-host", "127.0.0.1", "-port", str(port), "-seed", str(seed)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        preexec_fn=_die_with_parent(),
    )
    handle = ToxiproxyHandle("127.0.0.1", port, process, "go")
    try:
        _wait_until_answering(handle, deadline)
    except BaseException:
        handle.close()
        raise
    return handle
