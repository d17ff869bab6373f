"""The fault-injection substrate over real loopback sockets: the Toxiproxy API as the
toxiproxy-python client sees it (through our wrapper), and each fault as a client of a proxied
echo server meets it. The chaos suite's verdicts are only as good as these faults."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from tidelog.chaos.toxiproxy import (
    InvalidToxic,
    NotFound,
    ProxyExists,
    ProxyInfo,
    ToxiproxyClient,
    start_toxiproxy,
)
from tidelog.chaos.toxiproxy_server import ServerThread

pytestmark = pytest.mark.timeout(20)

IO_TIMEOUT_S = 5.0


class EchoServer:
    """Echoes every connection on its own thread and counts the bytes it sent back, so a test
    can wait until its data has left the upstream side (and is therefore at the proxy)."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self._echoed = 0
        self._cond = threading.Condition()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                conn.sendall(data)
                with self._cond:
                    self._echoed += len(data)
                    self._cond.notify_all()
        except OSError:
            pass

    @property
    def echoed(self) -> int:
        with self._cond:
            return self._echoed

    def wait_echoed(self, total: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self._echoed >= total, IO_TIMEOUT_S)

    def close(self) -> None:
        self._sock.close()
        for conn in self._conns:
            conn.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with ServerThread(seed=1) as running:
        yield running


@pytest.fixture
def client(server: ServerThread) -> Iterator[ToxiproxyClient]:
    with ToxiproxyClient("127.0.0.1", server.api_port) as api:
        yield api


@pytest.fixture
def proxy(client: ToxiproxyClient, echo: EchoServer) -> ProxyInfo:
    return client.create_proxy("echo", echo.address)


def connect(proxy: ProxyInfo) -> socket.socket:
    sock = socket.create_connection(proxy.address, timeout=IO_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, f"EOF after {len(data)} of {size} bytes"
        data += chunk
    return data


def recv_until_eof(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def round_trip(sock: socket.socket, payload: bytes = b"ping") -> bytes:
    sock.sendall(payload)
    return recv_exactly(sock, len(payload))


def body(exc: Exception) -> dict[str, object]:
    """The JSON error body the client's exceptions carry."""
    loaded: dict[str, object] = json.loads(exc.args[0])
    return loaded


# --- API ---------------------------------------------------------------------------------


def test_proxy_and_toxic_round_trips(client: ToxiproxyClient, echo: EchoServer) -> None:
    assert client.version() == "2.12.0"
    created = client.create_proxy("p1", echo.address)
    assert created.enabled and created.upstream == echo.address
    assert created.address[0] == "127.0.0.1" and created.address[1] != 0
    dormant = client.create_proxy("p2", echo.address, enabled=False)
    assert not dormant.enabled and dormant.listen == "127.0.0.1:0"
    assert client.proxies() == {"p1": created, "p2": dormant}
    assert client.get_proxy("p1") == created

    added = client.add_toxic("p1", "latency", attributes={"latency": 10})
    assert (added.name, added.stream, added.toxicity) == ("latency_downstream", "downstream", 1)
    assert added.attributes == {"latency": 10, "jitter": 0}
    client.add_toxic("p1", "limit_data", name="cap", stream="UPSTREAM", toxicity=0.5,
                     attributes={"bytes": 100})
    updated = client.update_toxic("p1", "latency_downstream", attributes={"jitter": 5})
    assert updated.attributes == {"latency": 10, "jitter": 5} and updated.toxicity == 1
    assert client.update_toxic("p1", "cap", toxicity=0.25).toxicity == 0.25
    # Upstream chain first, then downstream; the stream name is normalised.
    assert [(t.name, t.stream) for t in client.toxics("p1")] == [
        ("cap", "upstream"), ("latency_downstream", "downstream")]

    client.disable("p1")
    assert not client.get_proxy("p1").enabled
    client.enable("p1")
    assert client.get_proxy("p1") == created  # re-enabled on the same resolved port

    client.remove_toxic("p1", "cap")
    assert [t.name for t in client.toxics("p1")] == ["latency_downstream"]
    client.delete_proxy("p1")
    assert list(client.proxies()) == ["p2"]


def test_api_errors_carry_toxiproxy_bodies(
    client: ToxiproxyClient, proxy: ProxyInfo, echo: EchoServer
) -> None:
    with pytest.raises(NotFound):
        client.get_proxy("missing")
    with pytest.raises(NotFound) as not_found:
        client.delete_proxy("missing")
    assert body(not_found.value) == {"error": "proxy not found", "status": 404}
    with pytest.raises(NotFound) as no_toxic:
        client.remove_toxic("echo", "missing")
    assert body(no_toxic.value) == {"error": "toxic not found", "status": 404}
    with pytest.raises(NotFound) as no_toxic:
        client.update_toxic("echo", "missing", attributes={"latency": 1})
    assert body(no_toxic.value) == {"error": "toxic not found", "status": 404}

    client.add_toxic("echo", "latency")
    with pytest.raises(ProxyExists) as duplicate:
        client.add_toxic("echo", "latency")
    assert body(duplicate.value) == {"error": "toxic already exists", "status": 409}
    with pytest.raises(InvalidToxic) as bad_type:
        client.add_toxic("echo", "bogus")
    assert body(bad_type.value) == {"error": "invalid toxic type", "status": 400}
    with pytest.raises(InvalidToxic) as bad_stream:
        client.add_toxic("echo", "latency", stream="sideways")
    assert body(bad_stream.value)["error"] == (
        "stream was invalid, can be either upstream or downstream")
    with pytest.raises(InvalidToxic) as bad_attribute:
        client.add_toxic("echo", "latency", name="l2", attributes={"latency": "slow"})  # type: ignore[dict-item]
    assert str(body(bad_attribute.value)["error"]).startswith("bad request body")
    with pytest.raises(ProxyExists):  # the client checks this one itself
        client.create_proxy("echo", echo.address)


def test_raw_http_statuses_headers_and_populate(
    client: ToxiproxyClient, proxy: ProxyInfo, echo: EchoServer
) -> None:
    """What the client hides: status codes, headers, populate, and the loopback policy."""
    base = client.base_url
    session = requests.Session()
    session.trust_env = False

    def call(method: str, path: str, **kwargs: object) -> requests.Response:
        return session.request(method, base + path, timeout=IO_TIMEOUT_S, **kwargs)  # type: ignore[arg-type]

    version = call("GET", "/version")
    assert version.status_code == 200 and version.json() == {"version": "2.12.0"}
    assert version.headers["X-Toxiproxy-Request-Id"]
    assert call("GET", "/proxies", headers={"User-Agent": "Mozilla/5.0"}).status_code == 403

    duplicate = call("POST", "/proxies", json={"name": "echo", "upstream": echo.address})
    assert (duplicate.status_code, duplicate.json()) == (
        409, {"error": "proxy already exists", "status": 409})
    missing = call("POST", "/proxies", json={"name": "x"})
    assert missing.json() == {"error": "missing required field: upstream", "status": 400}
    garbled = call("POST", "/proxies", data=b"{not json")
    assert garbled.status_code == 400
    assert garbled.json()["error"].startswith("bad request body: ")
    remote = call("POST", "/proxies",
                  json={"name": "wide", "upstream": echo.address, "listen": "0.0.0.0:0"})
    assert remote.status_code == 500 and "non-loopback" in remote.json()["error"]
    assert call("PUT", "/proxies/echo").status_code == 405
    assert call("GET", "/nowhere").status_code == 404

    toxic = call("POST", "/proxies/echo/toxics", json={"type": "timeout"})
    assert toxic.status_code == 200 and toxic.json()["attributes"] == {"timeout": 0}
    assert call("DELETE", "/proxies/echo/toxics/timeout_downstream").status_code == 204

    items = [{"name": "echo", "upstream": echo.address, "listen": proxy.listen},
             {"name": "new", "upstream": echo.address, "listen": "127.0.0.1:0"}]
    populated = call("POST", "/populate", json=items)
    assert populated.status_code == 201
    assert populated.json()["proxies"][0]["listen"] == proxy.listen
    assert set(client.proxies()) == {"echo", "new"}
    invalid = call("POST", "/populate", json=[{"name": "a", "upstream": "b"}, {"name": "c"}])
    assert invalid.json() == {"error": "missing required field: upstream at proxy 2",
                              "status": 400}
    assert call("DELETE", "/proxies/new").status_code == 204


# --- proxies -----------------------------------------------------------------------------


def test_disable_closes_live_connections_and_refuses_new_ones(
    client: ToxiproxyClient, proxy: ProxyInfo
) -> None:
    live = connect(proxy)
    assert round_trip(live) == b"ping"
    client.disable("echo")
    with contextlib.suppress(ConnectionResetError):  # closed: EOF, or RST if bytes were unread
        assert live.recv(1) == b""
    with pytest.raises(ConnectionRefusedError):
        connect(proxy)
    client.enable("echo")
    with connect(proxy) as again:
        assert round_trip(again) == b"ping"
    live.close()


def test_dead_upstream_accepts_then_closes(client: ToxiproxyClient) -> None:
    with socket.socket() as unused:  # bound, never listening: connects to it are refused
        unused.bind(("127.0.0.1", 0))
        dead = client.create_proxy("dead", f"127.0.0.1:{unused.getsockname()[1]}")
        with connect(dead) as sock:
            assert sock.recv(1) == b""


def test_reset_removes_toxics_and_reenables(client: ToxiproxyClient, proxy: ProxyInfo) -> None:
    client.add_toxic("echo", "latency", attributes={"latency": 1000})
    client.add_toxic("echo", "timeout", stream="upstream")
    client.disable("echo")
    client.reset()
    assert client.toxics("echo") == [] and client.get_proxy("echo").enabled
    with connect(proxy) as sock:
        assert round_trip(sock) == b"ping"


# --- toxics ------------------------------------------------------------------------------


def test_latency_delays_and_preserves_order(client: ToxiproxyClient, proxy: ProxyInfo) -> None:
    client.add_toxic("echo", "latency", attributes={"latency": 200})
    with connect(proxy) as sock:
        started = time.monotonic()
        assert round_trip(sock) == b"ping"
        assert time.monotonic() - started >= 0.2
        client.update_toxic("echo", "latency_downstream", attributes={"latency": 30, "jitter": 25})
        messages = b"".join(b"%04d" % i for i in range(200))
        for i in range(200):
            sock.sendall(messages[4 * i:4 * i + 4])
        assert recv_exactly(sock, len(messages)) == messages


def test_latency_removal_flushes_held_data(
    client: ToxiproxyClient, proxy: ProxyInfo, echo: EchoServer
) -> None:
    client.add_toxic("echo", "latency", attributes={"latency": 30_000})
    with connect(proxy) as sock:
        sock.sendall(b"held")
        echo.wait_echoed(4)
        client.remove_toxic("echo", "latency_downstream")
        assert recv_exactly(sock, 4) == b"held"  # long before the 30 s latency


def test_timeout_zero_black_holes_until_removal_closes(
    client: ToxiproxyClient, proxy: ProxyInfo, echo: EchoServer
) -> None:
    client.add_toxic("echo", "timeout", attributes={"timeout": 0})
    with connect(proxy) as sock:
        sock.sendall(b"lost")
        echo.wait_echoed(4)
        sock.settimeout(0.3)  # observing an absence: nothing may arrive while the hole is open
        with pytest.raises(TimeoutError):
            sock.recv(1)
        sock.settimeout(IO_TIMEOUT_S)
        client.remove_toxic("echo", "timeout_downstream")
        assert recv_until_eof(sock) == b""


def test_timeout_closes_after_its_delay(client: ToxiproxyClient, proxy: ProxyInfo) -> None:
    client.add_toxic("echo", "timeout", stream="upstream", attributes={"timeout": 100})
    with connect(proxy) as sock:
        started = time.monotonic()
        sock.sendall(b"lost")
        assert recv_until_eof(sock) == b""
        assert time.monotonic() - started >= 0.05


def test_reset_peer_resets_the_connection(client: ToxiproxyClient, proxy: ProxyInfo) -> None:
    client.add_toxic("echo", "reset_peer", attributes={"timeout": 0})
    with connect(proxy) as sock:
        sock.sendall(b"ping")
        with pytest.raises(ConnectionResetError):
            recv_until_eof(sock)


def test_limit_data_closes_after_the_limit(client: ToxiproxyClient, proxy: ProxyInfo) -> None:
    client.add_toxic("echo", "limit_data", attributes={"bytes": 10})
    with connect(proxy) as sock:
        sock.sendall(b"0123456789abcdefghij")
        assert recv_until_eof(sock) == b"0123456789"


def test_bandwidth_paces_a_payload(client: ToxiproxyClient, proxy: ProxyInfo) -> None:
    client.add_toxic("echo", "bandwidth", attributes={"rate": 100})  # 100 KB/s
    payload = bytes(range(256)) * 160  # 40 960 bytes: at least ~0.4 s
    with connect(proxy) as sock:
        started = time.monotonic()
        sock.sendall(payload)
        assert recv_exactly(sock, len(payload)) == payload
        assert time.monotonic() - started >= 0.35


def test_slicer_and_slow_close_keep_the_bytes(client: ToxiproxyClient, proxy: ProxyInfo) -> None:
    client.add_toxic("echo", "slicer",
                     attributes={"average_size": 7, "size_variation": 3, "delay": 100})
    client.add_toxic("echo", "slow_close", stream="upstream", attributes={"delay": 100})
    payload = bytes(range(256)) * 4
    with connect(proxy) as sock:
        sock.sendall(payload)
        assert recv_exactly(sock, len(payload)) == payload
        started = time.monotonic()
        sock.shutdown(socket.SHUT_WR)
        assert recv_until_eof(sock) == b""
        assert time.monotonic() - started >= 0.1


def toxic_applied(proxy: ProxyInfo) -> bool:
    """One connection through a ``limit_data`` of 2 bytes: were we cut off?"""
    with connect(proxy) as sock:
        sock.sendall(b"ping")
        received = b""
        while len(received) < 4 and (chunk := sock.recv(4)):
            received += chunk
        assert received in (b"pi", b"ping")
        return received == b"pi"


@pytest.mark.parametrize("toxicity", [0.0, 1.0])
def test_toxicity_zero_never_applies_and_one_always_does(
    client: ToxiproxyClient, proxy: ProxyInfo, toxicity: float
) -> None:
    client.add_toxic("echo", "limit_data", toxicity=toxicity, attributes={"bytes": 2})
    assert [toxic_applied(proxy) for _ in range(10)] == [toxicity == 1.0] * 10


def test_same_seed_same_connection_order_same_draws(echo: EchoServer) -> None:
    def draws(seed: int) -> list[bool]:
        with ServerThread(seed=seed) as running, \
                ToxiproxyClient("127.0.0.1", running.api_port) as api:
            proxy = api.create_proxy("echo", echo.address)
            api.add_toxic("echo", "limit_data", toxicity=0.5, attributes={"bytes": 2})
            return [toxic_applied(proxy) for _ in range(16)]

    first = draws(7)
    assert draws(7) == first
    assert True in first and False in first


def test_toxic_added_while_connected_applies_to_that_connection(
    client: ToxiproxyClient, proxy: ProxyInfo
) -> None:
    with connect(proxy) as sock:
        assert round_trip(sock) == b"ping"
        client.add_toxic("echo", "latency", attributes={"latency": 200})
        started = time.monotonic()
        assert round_trip(sock) == b"ping"
        assert time.monotonic() - started >= 0.2
        client.add_toxic("echo", "limit_data", attributes={"bytes": 2})
        sock.sendall(b"ping")
        assert recv_until_eof(sock) == b"pi"


# --- launcher ----------------------------------------------------------------------------


def test_start_toxiproxy_serves_and_close_leaves_no_process(echo: EchoServer) -> None:
    with start_toxiproxy(seed=3) as handle, handle.client() as api:
        assert api.version()
        proxy = api.create_proxy("echo", echo.address)
        with connect(proxy) as sock:
            assert round_trip(sock) == b"ping"
    assert handle.process.poll() is not None
