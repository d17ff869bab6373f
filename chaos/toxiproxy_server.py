"""A Toxiproxy-compatible fault-injection server in asyncio.

The real Toxiproxy is a Go binary that no package registry reachable from here ships, so the
chaos suite brings its own: the same HTTP API (so the toxiproxy-python client drives either),
the same link model (one upstream connection per accepted client, two one-way links, a chain of
toxics per direction that also applies to live links) and the same toxics. Unlike the Go server,
every random draw (toxicity, jitter, slicer sizes) comes from one ``random.Random(seed)``, so a
run is reproducible given the seed and the order in which links start.

Deliberate differences from Go, each noted where it is implemented: ``reset_peer`` always sends
RST on both sockets (Go only does so for links that had the toxic when they started), adding a
toxic does not redraw the toxicity of the toxic before it, and proxies (and the API) refuse to
listen on non-loopback addresses unless started with ``allow_remote``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import ipaddress
import itertools
import json
import random
import signal
import socket
import struct
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

VERSION = "2.12.0"
DIRECTIONS = ("upstream", "downstream")
#: Attributes of each toxic type with their defaults (Go's struct fields, all integers).
TOXIC_ATTRIBUTES: dict[str, dict[str, int]] = {
    "noop": {},
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "slow_close": {"delay": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
    "limit_data": {"bytes": 0},
}

#: Bytes a link may hold between reading its source and writing its destination before it stops
#: reading, so a slow toxic pushes back on the sender through TCP instead of buffering forever.
_MAX_IN_FLIGHT = 1 << 20
_READ_SIZE = 1 << 16
_DIAL_TIMEOUT_S = 5.0
#: Go's API server drops a request whose headers and body take longer than this.
_HTTP_READ_TIMEOUT_S = 15.0
_MAX_BODY = 1 << 20
_REASONS = {
    200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request", 403: "Forbidden",
    404: "Not Found", 405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large",
    500: "Internal Server Error", 501: "Not Implemented",
}


class ApiError(Exception):
    """An error the API reports as ``{"error": message, "status": status}``."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def body(self) -> dict[str, Any]:
        return {"error": self.message, "status": self.status}


def _bad_body(reason: str) -> ApiError:
    return ApiError(f"bad request body: {reason}", 400)


def _proxy_not_found() -> ApiError:
    return ApiError("proxy not found", 404)


def _toxic_not_found() -> ApiError:
    return ApiError("toxic not found", 404)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _split_host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"address {address}: missing or invalid port")
    return host.strip("[]"), int(port)


async def _bind(
    host: str,
    port: int,
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    allow_remote: bool,
) -> tuple[asyncio.Server, str]:
    """Listens on exactly one resolved address, so port 0 yields one port even for names such as
    ``localhost`` that resolve to both IPv4 and IPv6. Returns the server and ``ip:port``."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    ip = str(infos[0][4][0])
    if not allow_remote and not ipaddress.ip_address(ip).is_loopback:
        raise OSError(f"refusing to listen on non-loopback address {ip} (allow_remote is off)")
    server = await asyncio.start_server(handler, ip, port, reuse_address=True)
    bound_ip, bound_port = server.sockets[0].getsockname()[:2]
    shown = f"[{bound_ip}]" if ":" in bound_ip else bound_ip
    return server, f"{shown}:{bound_port}"


def _set_nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        # A peer that reset the connection as it was accepted (a node killed mid-dial) has
        # already had its socket closed; the link's reader sees the EOF and tears it down.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


@dataclass
class Toxic:
    """A toxic as the API shows it; running instances live in each link's stages."""

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"attributes": dict(self.attributes), "name": self.name, "type": self.type,
                "stream": self.stream, "toxicity": self.toxicity}


def _merge_attributes(toxic_type: str, current: dict[str, int], given: object) -> dict[str, int]:
    """Go decodes attributes into the toxic's struct: known fields must be integers, unknown ones
    are ignored, and fields left out keep their current value."""
    if given is None:
        return dict(current)
    if not isinstance(given, dict):
        raise _bad_body("attributes must be an object")
    merged = dict(current)
    for key in TOXIC_ATTRIBUTES[toxic_type]:
        if key in given:
            if not _is_int(given[key]):
                raise _bad_body(f"attribute {key} must be an integer")
            merged[key] = given[key]
    return merged


def _parse_toxicity(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad_body("toxicity must be a number")
    return float(value)


@dataclass
class _Chunk:
    data: bytes
    #: loop.time() when the chunk was read, or when the last delaying toxic released it.
    stamp: float


_Queue = asyncio.Queue[_Chunk | None]  # None marks the end of the stream


class _Stage:
    """One toxic running on one link, between an input and an output queue. Rewiring a live
    link only ever reassigns ``output`` (the attribute is read at each emit), so the queues are
    unbounded and every put is synchronous; the link's in-flight budget bounds memory instead."""

    def __init__(self, link: _Link, toxic: Toxic, input_queue: _Queue, output: _Queue) -> None:
        self.link = link
        self.toxic = toxic
        self.input = input_queue
        self.output = output
        self.closed = False
        #: limit_data's count survives updates of the toxic, as in Go.
        self.sent = 0
        self.rng = random.Random()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Draws this link's toxicity for the toxic (Go draws in ``ToxicStub.Run``: at link
        start, when the toxic is added and when it is updated) and starts piping."""
        draws = self.link.connection.proxy.rng
        active = draws.random() < self.toxic.toxicity
        self.rng = random.Random(draws.getrandbits(64))
        pipe = _PIPES[self.toxic.type] if active else _Stage._noop
        self._task = self.link.connection.spawn(pipe(self))

    async def interrupt(self) -> None:
        """Stops the running pipe; pipes hand any chunk they hold to their output first, so an
        interrupted toxic never drops or reorders data."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])

    def emit(self, chunk: _Chunk | None) -> None:
        self.output.put_nowait(chunk)
        if chunk is None:
            self.closed = True

    def drop(self, chunk: _Chunk) -> None:
        self.link.release(len(chunk.data))

    async def _hold(self, chunk: _Chunk | None, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self.emit(chunk)
            raise

    def _attr(self, key: str) -> int:
        return self.toxic.attributes[key]

    async def _noop(self) -> None:
        while (chunk := await self.input.get()) is not None:
            self.emit(chunk)
        self.emit(None)

    async def _latency(self) -> None:
        loop = asyncio.get_running_loop()
        latency, jitter = self._attr("latency"), self._attr("jitter")
        while (chunk := await self.input.get()) is not None:
            delay = latency + (self.rng.randrange(-jitter, jitter) if jitter > 0 else 0)
            wait = chunk.stamp + delay / 1000 - loop.time()
            if wait > 0:
                await self._hold(chunk, wait)
            chunk.stamp = loop.time()
            self.emit(chunk)
        self.emit(None)

    async def _bandwidth(self) -> None:
        """Go's pacing: a running debt of send time, paid in 100 ms slices for large chunks."""
        loop = asyncio.get_running_loop()
        rate = self._attr("rate")
        debt = 0.0
        while (chunk := await self.input.get()) is not None:
            if rate <= 0:
                self.emit(chunk)
                continue
            debt += len(chunk.data) / (rate * 1000)
            piece = rate * 100
            while len(chunk.data) > piece:
                await self._hold(chunk, 0.1)
                self.emit(_Chunk(chunk.data[:piece], chunk.stamp))
                chunk = _Chunk(chunk.data[piece:], chunk.stamp)
                debt -= 0.1
            started = loop.time()
            await self._hold(chunk, max(debt, 0.0))
            debt -= loop.time() - started
            self.emit(chunk)
        self.emit(None)

    async def _slow_close(self) -> None:
        while (chunk := await self.input.get()) is not None:
            self.emit(chunk)
        await self._hold(None, self._attr("delay") / 1000)
        self.emit(None)

    async def _timeout(self) -> None:
        """Drops everything; closes the link after ``timeout`` ms, or never when it is 0 (a black
        hole until the toxic is removed, which then closes the link: see ``_Link.remove``)."""
        timeout = self._attr("timeout")
        deadline = asyncio.get_running_loop().time() + timeout / 1000 if timeout > 0 else None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                while (chunk := await self.input.get()) is not None:
                    self.drop(chunk)
        self.emit(None)

    async def _reset_peer(self) -> None:
        chunk = await self.input.get()
        if chunk is not None:
            self.drop(chunk)
        await asyncio.sleep(self._attr("timeout") / 1000)
        self.link.connection.abort(reset=True)

    async def _limit_data(self) -> None:
        limit = self._attr("bytes")
        while (chunk := await self.input.get()) is not None:
            allowed = max(limit - self.sent, 0)
            if len(chunk.data) > allowed:
                self.link.release(len(chunk.data) - allowed)
                chunk.data = chunk.data[:allowed]
            if chunk.data:
                self.sent += len(chunk.data)
                self.emit(chunk)
            if self.sent >= limit:
                break
        self.emit(None)

    async def _slicer(self) -> None:
        delay = self._attr("delay") / 1_000_000
        while (chunk := await self.input.get()) is not None:
            cuts = self._cuts(0, len(chunk.data))
            for start, end in itertools.pairwise(cuts):
                if start:
                    await self._hold(_Chunk(chunk.data[start:], chunk.stamp), delay)
                self.emit(_Chunk(chunk.data[start:end], chunk.stamp))
        self.emit(None)

    def _cuts(self, start: int, end: int) -> list[int]:
        """Go's recursive halving: split until a piece is within ``size_variation`` of
        ``average_size``, moving each midpoint by up to ± the variation."""
        average, variation = self._attr("average_size"), self._attr("size_variation")
        if average <= 0 or (end - start) - average <= variation:
            return [start, end]
        mid = start + (end - start) // 2
        if variation > 0:
            mid += self.rng.randrange(-variation, variation)
        mid = min(max(mid, start + 1), end - 1)
        return self._cuts(start, mid) + self._cuts(mid, end)[1:]


_PIPES: dict[str, Callable[[_Stage], Coroutine[Any, Any, None]]] = {
    "noop": _Stage._noop,
    "latency": _Stage._latency,
    "bandwidth": _Stage._bandwidth,
    "slow_close": _Stage._slow_close,
    "timeout": _Stage._timeout,
    "reset_peer": _Stage._reset_peer,
    "limit_data": _Stage._limit_data,
    "slicer": _Stage._slicer,
}


class _Link:
    """One direction of a proxied connection: reader → stages → writer."""

    def __init__(
        self,
        connection: _Connection,
        source: asyncio.StreamReader,
        dest: asyncio.StreamWriter,
    ) -> None:
        self.connection = connection
        self.source = source
        self.dest = dest
        self.stages: list[_Stage] = []
        self._final: _Queue = asyncio.Queue()
        self._head = self._final
        self._in_flight = 0
        self._room = asyncio.Event()
        self._room.set()

    def start(self, chain: list[Toxic]) -> None:
        for toxic in chain:
            self.add(toxic)
        self.connection.spawn(self._read())
        self.connection.spawn(self._write())

    def release(self, size: int) -> None:
        self._in_flight -= size
        if self._in_flight < _MAX_IN_FLIGHT:
            self._room.set()

    def add(self, toxic: Toxic) -> None:
        queue: _Queue = asyncio.Queue()
        stage = _Stage(self, toxic, queue, self._final)
        if self.stages:
            self.stages[-1].output = queue
        else:
            self._head = queue
        self.stages.append(stage)
        stage.start()

    async def update(self, toxic: Toxic) -> None:
        stage = self._stage(toxic.name)
        if stage.closed:
            return
        await stage.interrupt()
        stage.toxic = toxic
        stage.start()

    async def remove(self, name: str) -> None:
        """Splices the stage out: what it held and what waits at its input move on in order."""
        stage = self._stage(name)
        await stage.interrupt()
        if stage.toxic.type == "timeout":
            # Go's Cleanup: the bytes it dropped would corrupt the stream, so close the link.
            stage.emit(None)
        while not stage.input.empty():
            stage.output.put_nowait(stage.input.get_nowait())
        index = self.stages.index(stage)
        if index:
            self.stages[index - 1].output = stage.output
        else:
            self._head = stage.output
        del self.stages[index]

    def _stage(self, name: str) -> _Stage:
        return next(stage for stage in self.stages if stage.toxic.name == name)

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):
            while True:
                await self._room.wait()
                data = await self.source.read(_READ_SIZE)
                if not data:
                    break
                self._in_flight += len(data)
                if self._in_flight >= _MAX_IN_FLIGHT:
                    self._room.clear()
                self._head.put_nowait(_Chunk(data, loop.time()))
        self._head.put_nowait(None)

    async def _write(self) -> None:
        """Like Go's link, the end of either stream closes the destination completely, which in
        turn ends the other direction: a proxied connection does not stay half-open."""
        with contextlib.suppress(OSError):
            while (chunk := await self._final.get()) is not None:
                self.dest.write(chunk.data)
                await self.dest.drain()
                self.release(len(chunk.data))
        self.dest.close()
        self.connection.link_done()


class _Connection:
    """An accepted client and its upstream connection, with the two links between them."""

    def __init__(
        self,
        proxy: _Proxy,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.proxy = proxy
        self._writers = (client[1], upstream[1])
        self._tasks: set[asyncio.Task[None]] = set()
        self._open_links = 2
        self.links = {
            "upstream": _Link(self, client[0], upstream[1]),
            "downstream": _Link(self, upstream[0], client[1]),
        }

    def start(self) -> None:
        for direction in DIRECTIONS:
            self.links[direction].start(self.proxy.chain(direction))

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def link_done(self) -> None:
        self._open_links -= 1
        if self._open_links == 0:
            self.abort()

    def abort(self, *, reset: bool = False) -> None:
        """Closes both sockets at once (with RST when ``reset``: SO_LINGER 0 discards unsent data
        and makes close send a reset) and stops every task of both links."""
        self.proxy.connections.pop(self, None)
        for writer in self._writers:
            sock = writer.get_extra_info("socket")
            if reset and sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()


class _Proxy:
    def __init__(
        self, name: str, listen: str, upstream: str, rng: random.Random, allow_remote: bool
    ) -> None:
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.rng = rng
        self.allow_remote = allow_remote
        self.enabled = False
        self.toxics: dict[str, Toxic] = {}
        #: Live connections in accept order (a dict as an ordered set), so that applying a toxic
        #: to them draws toxicity in a reproducible order.
        self.connections: dict[_Connection, None] = {}
        self._server: asyncio.Server | None = None
        #: Bumped by every stop, so a client accepted by an earlier listener is turned away.
        self._generation = 0
        self._dialing: set[asyncio.Task[Any]] = set()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream,
                "enabled": self.enabled, "toxics": [t.to_json() for t in self.toxic_list()]}

    def chain(self, direction: str) -> list[Toxic]:
        return [t for t in self.toxics.values() if t.stream == direction]

    def toxic_list(self) -> list[Toxic]:
        return [t for direction in DIRECTIONS for t in self.chain(direction)]

    async def start(self) -> None:
        if self.enabled:
            return
        try:
            host, port = _split_host_port(self.listen)
            handler = functools.partial(self._accept, self._generation)
            self._server, self.listen = await _bind(host, port, handler, self.allow_remote)
        except OSError as exc:
            raise ApiError(f"listen {self.listen}: {exc}", 500) from exc
        except ValueError as exc:
            raise ApiError(str(exc), 500) from exc
        self.enabled = True

    def stop(self) -> None:
        """Closes the listener (new connects get ECONNREFUSED) and every live connection."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self.enabled = False
        self._generation += 1
        for task in list(self._dialing):
            task.cancel()
        for connection in list(self.connections):
            connection.abort()

    async def _accept(self, generation: int, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        """Dials upstream for each client; when that fails the client is closed at once, so a
        dead node behind a proxy looks like accept-then-EOF, as with Go's Toxiproxy."""
        if generation != self._generation:
            writer.transport.abort()
            return
        task = asyncio.current_task()
        assert task is not None
        self._dialing.add(task)
        try:
            host, port = _split_host_port(self.upstream)
            upstream = await asyncio.wait_for(asyncio.open_connection(host, port),
                                              _DIAL_TIMEOUT_S)
        except (OSError, ValueError, TimeoutError):
            writer.close()
            return
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
        finally:
            self._dialing.discard(task)
        _set_nodelay(writer)
        _set_nodelay(upstream[1])
        connection = _Connection(self, (reader, writer), upstream)
        self.connections[connection] = None
        connection.start()


def _decode(body: bytes) -> Any:
    if not body.strip():
        raise _bad_body("EOF")
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad_body(str(exc)) from exc


def _object(body: bytes) -> dict[str, Any]:
    data = _decode(body)
    if not isinstance(data, dict):
        raise _bad_body("expected a JSON object")
    return data


def _field(data: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, kind):
        raise _bad_body(f"{key} must be a {kind.__name__}")
    return value


_Response = tuple[int, Any]  # status and a JSON-able body (None: no body)


class ToxiproxyServer:
    """The API server and its proxies, all on the running event loop."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 8474, seed: int = 0, *,
        allow_remote: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.seed = seed
        self.allow_remote = allow_remote
        self.rng = random.Random(seed)
        self.proxies: dict[str, _Proxy] = {}
        self.address = ""
        self._server: asyncio.Server | None = None
        self._http_clients: set[asyncio.StreamWriter] = set()
        # Mutations await (interrupting toxics on live links); one at a time keeps chains sane.
        self._lock = asyncio.Lock()

    @property
    def api_port(self) -> int:
        return _split_host_port(self.address)[1]

    async def start(self) -> None:
        self._server, self.address = await _bind(self.host, self.port, self._serve_http,
                                                 self.allow_remote)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._http_clients):
            writer.transport.abort()
        for proxy in self.proxies.values():
            proxy.stop()
        self.proxies.clear()

    async def _serve_http(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        self._http_clients.add(writer)
        try:
            while await self._serve_request(reader, writer):
                pass
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError,
                TimeoutError):
            pass
        finally:
            self._http_clients.discard(writer)
            writer.close()

    async def _serve_request(self, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> bool:
        """Answers one request; returns whether the connection stays open for another."""
        line = await reader.readline()
        if not line.strip():
            return False
        async with asyncio.timeout(_HTTP_READ_TIMEOUT_S):
            method, target, version = line.decode("latin-1").split()
            headers: dict[str, str] = {}
            while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                key, _, value = header.decode("latin-1").partition(":")
                headers[key.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            chunked = "chunked" in headers.get("transfer-encoding", "").lower()
            if length > _MAX_BODY or chunked:
                status, payload = (413, None) if length > _MAX_BODY else (501, None)
                await self._respond(writer, status, payload, "text/plain", close=True)
                return False
            body = await reader.readexactly(length)
        connection = headers.get("connection", "").lower()
        keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
        if headers.get("user-agent", "").startswith("Mozilla/"):
            await self._respond(writer, 403, "User agent not allowed\n", "text/plain",
                                close=not keep_alive)
            return keep_alive
        status, payload, content_type = await self._dispatch(method, urlsplit(target).path, body)
        await self._respond(writer, status, payload, content_type, close=not keep_alive)
        return keep_alive

    async def _respond(self, writer: asyncio.StreamWriter, status: int, payload: Any,
                       content_type: str, *, close: bool) -> None:
        if payload is None:
            data = b""
        elif isinstance(payload, str):
            data = payload.encode()
        else:
            data = json.dumps(payload, separators=(",", ":")).encode()
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}",
                f"X-Toxiproxy-Request-Id: {uuid.uuid4().hex}"]
        if status != 204:
            head += [f"Content-Type: {content_type}", f"Content-Length: {len(data)}"]
        if close:
            head.append("Connection: close")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
        await writer.drain()

    async def _dispatch(self, method: str, path: str, body: bytes) -> tuple[int, Any, str]:
        parts = [unquote(p) for p in path.split("/")[1:]]
        routes: dict[str, Callable[[], Awaitable[_Response]]]
        match parts:
            case ["version"]:
                if method == "GET":
                    return 200, f'{{"version": "{VERSION}"}}\n', "application/json;charset=utf-8"
                routes = {}
            case ["reset"]:
                routes = {"POST": self._reset}
            case ["proxies"]:
                routes = {"GET": self._list_proxies, "POST": lambda: self._create_proxy(body)}
            case ["populate"]:
                routes = {"POST": lambda: self._populate(body)}
            case ["proxies", name] if name:
                update = lambda: self._update_proxy(name, body)  # noqa: E731
                routes = {"GET": lambda: self._show_proxy(name), "POST": update, "PATCH": update,
                          "DELETE": lambda: self._delete_proxy(name)}
            case ["proxies", name, "toxics"] if name:
                routes = {"GET": lambda: self._list_toxics(name),
                          "POST": lambda: self._create_toxic(name, body)}
            case ["proxies", name, "toxics", toxic] if name and toxic:
                update = lambda: self._update_toxic(name, toxic, body)  # noqa: E731
                routes = {"GET": lambda: self._show_toxic(name, toxic), "POST": update,
                          "PATCH": update, "DELETE": lambda: self._delete_toxic(name, toxic)}
            case _:
                return 404, "404 page not found\n", "text/plain; charset=utf-8"
        handler = routes.get(method)
        if handler is None:
            return 405, None, "text/plain"
        try:
            status, payload = await handler()
        except ApiError as exc:
            return exc.status, exc.body(), "application/json"
        return status, payload, "application/json"

    def _proxy(self, name: str) -> _Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise _proxy_not_found()
        return proxy

    async def _reset(self) -> _Response:
        async with self._lock:
            for proxy in list(self.proxies.values()):
                await proxy.start()
                for toxic in proxy.toxic_list():
                    await self._remove_toxic(proxy, toxic)
        return 204, None

    async def _list_proxies(self) -> _Response:
        return 200, {name: proxy.to_json() for name, proxy in self.proxies.items()}

    def _parse_proxy(self, data: object, where: str = "") -> tuple[str, str, str, bool]:
        if not isinstance(data, dict):
            raise _bad_body("expected a JSON object")
        name = _field(data, "name", str, "")
        upstream = _field(data, "upstream", str, "")
        listen = _field(data, "listen", str, "127.0.0.1:0") or "127.0.0.1:0"
        enabled = _field(data, "enabled", bool, True)
        for key, value in (("name", name), ("upstream", upstream)):
            if not value:
                raise ApiError(f"missing required field: {key}{where}", 400)
        return name, listen, upstream, enabled

    async def _add_proxy(self, name: str, listen: str, upstream: str, enabled: bool) -> _Proxy:
        proxy = _Proxy(name, listen, upstream, self.rng, self.allow_remote)
        if enabled:
            await proxy.start()
        self.proxies[name] = proxy
        return proxy

    async def _create_proxy(self, body: bytes) -> _Response:
        name, listen, upstream, enabled = self._parse_proxy(_object(body))
        async with self._lock:
            if name in self.proxies:
                raise ApiError("proxy already exists", 409)
            proxy = await self._add_proxy(name, listen, upstream, enabled)
        return 201, proxy.to_json()

    async def _populate(self, body: bytes) -> _Response:
        """Add-or-replace per item; on a mid-way failure the body still lists what was done."""
        data = _decode(body)
        if not isinstance(data, list):
            raise _bad_body("expected a JSON array")
        items = [self._parse_proxy(item, f" at proxy {i + 1}") for i, item in enumerate(data)]
        done: list[dict[str, Any]] = []
        async with self._lock:
            for name, listen, upstream, enabled in items:
                existing = self.proxies.get(name)
                if existing is not None:
                    if existing.listen == listen and existing.upstream == upstream:
                        done.append(existing.to_json())
                        continue
                    existing.stop()
                    del self.proxies[name]
                try:
                    done.append((await self._add_proxy(name, listen, upstream, enabled)).to_json())
                except ApiError as exc:
                    return exc.status, {**exc.body(), "proxies": done}
        return 201, {"proxies": done}

    async def _show_proxy(self, name: str) -> _Response:
        return 200, self._proxy(name).to_json()

    async def _update_proxy(self, name: str, body: bytes) -> _Response:
        async with self._lock:
            proxy = self._proxy(name)
            data = _object(body)
            listen = _field(data, "listen", str, proxy.listen) or proxy.listen
            upstream = _field(data, "upstream", str, proxy.upstream) or proxy.upstream
            enabled = _field(data, "enabled", bool, proxy.enabled)
            if (listen, upstream) != (proxy.listen, proxy.upstream):
                proxy.stop()
                proxy.listen, proxy.upstream = listen, upstream
            if enabled:
                await proxy.start()
            else:
                proxy.stop()
        return 200, proxy.to_json()

    async def _delete_proxy(self, name: str) -> _Response:
        async with self._lock:
            self._proxy(name).stop()
            del self.proxies[name]
        return 204, None

    async def _list_toxics(self, name: str) -> _Response:
        return 200, [t.to_json() for t in self._proxy(name).toxic_list()]

    def _toxic(self, proxy: _Proxy, name: str) -> Toxic:
        toxic = proxy.toxics.get(name)
        if toxic is None:
            raise _toxic_not_found()
        return toxic

    async def _show_toxic(self, name: str, toxic: str) -> _Response:
        return 200, self._toxic(self._proxy(name), toxic).to_json()

    async def _create_toxic(self, name: str, body: bytes) -> _Response:
        self._proxy(name)  # an unknown proxy is a 404 whatever the body, as in Go
        data = _object(body)
        stream = _field(data, "stream", str, "downstream").lower()
        if stream not in DIRECTIONS:
            raise ApiError("stream was invalid, can be either upstream or downstream", 400)
        toxic_type = _field(data, "type", str, "")
        toxic_name = _field(data, "name", str, "") or f"{toxic_type}_{stream}"
        if toxic_type not in TOXIC_ATTRIBUTES:
            raise ApiError("invalid toxic type", 400)
        toxicity = _parse_toxicity(data.get("toxicity", 1.0))
        attributes = _merge_attributes(toxic_type, TOXIC_ATTRIBUTES[toxic_type],
                                       data.get("attributes"))
        async with self._lock:
            proxy = self._proxy(name)
            if toxic_name in proxy.toxics:
                raise ApiError("toxic already exists", 409)
            toxic = Toxic(toxic_name, toxic_type, stream, toxicity, attributes)
            proxy.toxics[toxic_name] = toxic
            for connection in list(proxy.connections):
                connection.links[stream].add(toxic)
        return 200, toxic.to_json()

    async def _update_toxic(self, name: str, toxic_name: str, body: bytes) -> _Response:
        async with self._lock:
            proxy = self._proxy(name)
            current = self._toxic(proxy, toxic_name)
            data = _object(body)
            toxic = Toxic(
                current.name, current.type, current.stream,
                _parse_toxicity(data.get("toxicity", current.toxicity)),
                _merge_attributes(current.type, current.attributes, data.get("attributes")),
            )
            proxy.toxics[toxic_name] = toxic
            for connection in list(proxy.connections):
                await connection.links[toxic.stream].update(toxic)
        return 200, toxic.to_json()

    async def _delete_toxic(self, name: str, toxic_name: str) -> _Response:
        async with self._lock:
            proxy = self._proxy(name)
            await self._remove_toxic(proxy, self._toxic(proxy, toxic_name))
        return 204, None

    async def _remove_toxic(self, proxy: _Proxy, toxic: Toxic) -> None:
        del proxy.toxics[toxic.name]
        for connection in list(proxy.connections):
            await connection.links[toxic.stream].remove(toxic.name)


class ServerThread:
    """Runs a ToxiproxyServer on its own event loop in a background thread, for sync tests."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, seed: int = 0, *,
                 allow_remote: bool = False) -> None:
        self.server = ToxiproxyServer(host, port, seed, allow_remote=allow_remote)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="toxiproxy-server", daemon=True)

    @property
    def api_port(self) -> int:
        return self.server.api_port

    def __enter__(self) -> ServerThread:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.server.start())
        except BaseException as exc:  # reported to __enter__'s caller
            self._error = exc
            self._ready.set()
            self._loop.close()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self.server.stop())
        self._cancel_leftovers()
        self._loop.close()

    def _cancel_leftovers(self) -> None:
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        if tasks:
            self._loop.run_until_complete(asyncio.wait(tasks))


async def _serve(args: argparse.Namespace) -> None:
    server = ToxiproxyServer(args.host, args.port, args.seed, allow_remote=args.allow_remote)
    await server.start()
    print(f"listening {server.address}", flush=True)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await stopping.wait()
    await server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.toxiproxy_server",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8474, help="0 picks a free port")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow the API and proxies to listen on non-loopback addresses")
    args = parser.parse_args(argv)
    try:
        asyncio.run(_serve(args))
    except OSError as exc:
        print(f"toxiproxy_server: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
