"""Replays a Raft scenario transcript (tests/replication/raft_scenarios/*.txt) against cores
under the one driver, in the style of etcd's datadriven tests: a transcript is a list of
commands, each followed by ``----`` and the output it must produce, so a reader sees every
message, Ready and state a scenario goes through, and a regression shows as a diff of them.

A block is a command line, optional input lines, ``----``, then the expected output up to a
blank line. Lines starting with ``#`` (and blank lines) between blocks are prose. Commands:

    cluster [n=3] [max-append-bytes=N] [max-inflight-appends=N] [quiesce=true]
        A new group of cores 0..n-1 (``quiesce``: idle groups go quiet, RaftConfig.quiesce).
        Input lines set a node's log and durable hard state:
        ``1: log=1,1,2*3 term=2 vote=0 hw=1`` (one single-offset batch per epoch listed,
        from offset 0, ``2*3`` meaning three of epoch 2).
    elect I [drop=F] [hold=F]       ticks I and delivers messages until I leads
    tick I [n=1]                     ticks core I only; nothing is delivered
    heartbeat [n=1] [drop=F] [hold=F] [trace=F]
                                     the leader ticks, then every message is delivered
    settle [drop=F] [hold=F] [trace=F] [release]
                                     delivers every message until none is left; ``release``
                                     delivers the held messages first
    propose I DATA... [drop=F] [settle=false]
                                     proposes one single-record batch per DATA
    transfer I to=J                  leadership transfer from I to J
    read I ctx=N                     a linearizable read on I (read_index)
    campaign I                       I stands for election now (a new partition's preferred)
    defer-election I                 I waits an extra election timeout before standing
    peer-down I J                    I's node liveness has not heard from J for a timeout
    step I                           steps each message of the input into core I
    flush I [hold]                   runs I's driver until it has no Ready: what it sent
                                     (dropped, or held with ``hold``)
    begin I / persist I              one driver round of I, taken apart: the writes, the HW
                                     published and what went out before they are durable;
                                     then what went after
    ready I / advance I              the core's Ready without the driver; apply and advance it
    prompt I [deliver]               the core's prompt messages (take_prompt_messages)
    restart I                        a new core on I's log and durable hard state
    retire I                         the node rebuilt I's core: a round in flight is dropped
    advance-log-start I... offset=N  retention moves these logs' start to N
    state [I...] / log [I...] / readies I / published I / leaderships I / reads I / held
    repeat n=K                       runs the input's commands K times; equal consecutive
                                     iterations' outputs are shown once

Filters F select messages by clauses that must all hold, separated by commas: ``node:I`` (from
or to I), ``dst:I``, ``src:I``, ``type:Name``, ``first:N`` (its first entry's offset),
``log-end@I:N`` (node I's log ends at N when the message moves), or any message field
(``success:False``). A held message waits for ``settle release``.

Messages read and print as ``Type src->dst term=T field=value...`` (fields at their default
omitted); entries as ``offset@epoch``, with ``=data`` when the data is not the ``e<epoch>o<offset>``
a ``log=`` input writes, and ``a..b@e`` for a run of such single-offset batches.
"""

from __future__ import annotations

import codecs
import dataclasses
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from raft_helpers import Cluster, batches

from tidelog.replication import (
    AppendRequest,
    AppendResponse,
    Entry,
    HardState,
    Heartbeat,
    HeartbeatResponse,
    Message,
    PreVoteRequest,
    PreVoteResponse,
    Ready,
    Role,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tidelog.replication.driver import Round

MESSAGE_TYPES: dict[str, type] = {
    t.__name__: t
    for t in (AppendRequest, AppendResponse, Heartbeat, HeartbeatResponse, PreVoteRequest,
              PreVoteResponse, TimeoutNow, VoteRequest, VoteResponse)
}
_TOKEN = re.compile(r"[^\s\[]*\[[^\]]*\][^\s]*|\S+")


# ---- the file ----------------------------------------------------------------------------------


@dataclass
class Block:
    prose: list[str]
    line: int
    command: str
    input: list[str]
    expected: list[str]


def parse(text: str) -> tuple[list[Block], list[str]]:
    """The blocks of a transcript, and the prose after the last one."""
    blocks: list[Block] = []
    prose: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            prose.append(line)
            i += 1
            continue
        start, command, given = i + 1, line, []
        i += 1
        while i < len(lines) and lines[i] != "----":
            given.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"line {start}: {command!r} has no ---- line")
        i += 1
        expected = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        blocks.append(Block(prose, start, command, given, expected))
        prose = []
    return blocks, prose


def render(blocks: Sequence[Block], outputs: Sequence[list[str]], tail: list[str]) -> str:
    out: list[str] = []
    for block, output in zip(blocks, outputs, strict=True):
        out += [*block.prose, block.command, *block.input, "----", *output]
    return "\n".join(out + tail) + "\n"


# ---- notation ----------------------------------------------------------------------------------


def _default_data(offset: int, epoch: int) -> bytes:
    """What `raft_helpers.batches` writes into the batch at `offset` of `epoch`."""
    return bytes(batches([epoch], start=offset)[0].data)


def _show_bytes(data: bytes | memoryview) -> str:
    return "".join(chr(b) if 33 <= b < 127 and b not in b"\\[]" else f"\\x{b:02x}"
                   for b in bytes(data))


def show_entries(entries: Sequence[Entry]) -> str:
    parts: list[str] = []
    i = 0
    while i < len(entries):
        e = entries[i]
        j = i
        while (j + 1 < len(entries) and _plain(entries[j + 1]) and _plain(e)
               and entries[j + 1].epoch == e.epoch
               and entries[j + 1].base_offset == entries[j].base_offset + 1):
            j += 1
        if j - i >= 2:
            parts.append(f"{e.base_offset}..{entries[j].base_offset}@{e.epoch}")
            i = j + 1
            continue
        span = str(e.base_offset) if e.last_offset == e.base_offset else (
            f"{e.base_offset}~{e.last_offset}")
        data = "" if _plain(e) else "=" + _show_bytes(e.data)
        parts.append(f"{span}@{e.epoch}{data}")
        i += 1
    return "[" + " ".join(parts) + "]"


def _plain(e: Entry) -> bool:
    return e.base_offset == e.last_offset and bytes(e.data) == _default_data(e.base_offset,
                                                                                e.epoch)


def parse_entries(text: str) -> tuple[Entry, ...]:
    if not (text.startswith("[") and text.endswith("]")):
        raise ValueError(f"entries are written [offset@epoch ...], got {text!r}")
    out: list[Entry] = []
    for part in text[1:-1].split():
        span, _, rest = part.partition("@")
        epoch_text, has_data, data_text = rest.partition("=")
        epoch = int(epoch_text)
        if ".." in span:
            first, last = (int(x) for x in span.split(".."))
            out += batches([epoch] * (last - first + 1), start=first)
            continue
        base, _, last_text = span.partition("~")
        first = int(base)
        last = int(last_text) if last_text else first
        data = codecs.escape_decode(data_text.encode())[0] if has_data else _default_data(
            first, epoch)
        out.append(Entry(first, last, epoch, data))
    return tuple(out)


def show_message(m: Message) -> str:
    parts = [f"{type(m).__name__} {m.src}->{m.dst} term={m.term}"]
    for f in dataclasses.fields(m):
        if f.name in ("term", "src", "dst"):
            continue
        value = getattr(m, f.name)
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        parts.append(f"{f.name}={show_entries(value) if f.name == 'entries' else value}")
    return " ".join(parts)


def _value(text: str) -> object:
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    if text.startswith("["):
        return parse_entries(text)
    return int(text)


def parse_message(text: str) -> Message:
    tokens = _TOKEN.findall(text)
    cls = MESSAGE_TYPES[tokens[0]]
    src, _, dst = tokens[1].partition("->")
    fields: dict[str, object] = {"src": int(src), "dst": int(dst)}
    for token in tokens[2:]:
        key, _, value = token.partition("=")
        fields[key] = _value(value)
    message: Message = cls(**fields)
    return message


def show_ready(rd: Ready) -> list[str]:
    head = [f"Ready {rd.role.value} term={rd.term} leader={rd.leader_id} hw={rd.high_watermark}"]
    if rd.hard_state is not None:
        hs = rd.hard_state
        head.append(f"hard_state=({hs.term}, {hs.vote}, {hs.high_watermark})")
    if rd.reset_to is not None:
        head.append(f"reset_to={rd.reset_to}")
    if rd.truncate_to is not None:
        head.append(f"truncate_to={rd.truncate_to}")
    if rd.entries:
        head.append(f"entries={show_entries(rd.entries)}")
    head += _show_reads(rd)
    return [" ".join(head), *(f"  {show_message(m)}" for m in rd.messages)]


def _show_reads(rd: Ready) -> list[str]:
    out = [f"read_states={[(r.ctx, r.index) for r in rd.read_states]}"] if rd.read_states else []
    if rd.failed_reads:
        out.append(f"failed_reads={list(rd.failed_reads)}")
    return out


# ---- filters -----------------------------------------------------------------------------------


Filter = Callable[[Message], bool]


def parse_filter(spec: str, c: Cluster) -> Filter:
    clauses: list[Filter] = []
    for clause in spec.split(","):
        key, sep, value = clause.partition(":")
        if not sep:
            raise ValueError(f"filter clause {clause!r} is not key:value")
        clauses.append(_clause(key, value, c))
    return lambda m: all(clause(m) for clause in clauses)


def _clause(key: str, value: str, c: Cluster) -> Filter:
    if key == "node":
        node = int(value)
        return lambda m: node in (m.src, m.dst)
    if key == "type":
        if value not in MESSAGE_TYPES:
            raise ValueError(f"no message type {value!r}")
        return lambda m: type(m).__name__ == value
    if key == "first":
        offset = int(value)
        return lambda m: isinstance(m, AppendRequest) and bool(m.entries) and (
            m.entries[0].base_offset == offset)
    if key.startswith("log-end@"):
        node, end = int(key.removeprefix("log-end@")), int(value)
        return lambda m: c.logs[node].log_end_offset == end
    want = _value(value)
    return lambda m: hasattr(m, key) and getattr(m, key) == want


# ---- the replay --------------------------------------------------------------------------------


@dataclass
class Transcript:
    """The state of one replay: the cores, the messages held back, rounds taken apart."""

    cluster: Cluster | None = None
    held: list[Message] = field(default_factory=list)
    rounds: dict[int, Round[int]] = field(default_factory=dict)
    in_flight: dict[int, Ready] = field(default_factory=dict)

    @property
    def c(self) -> Cluster:
        if self.cluster is None:
            raise ValueError("no cluster yet: start with `cluster`")
        return self.cluster

    def run(self, command: str, given: list[str]) -> list[str]:
        name, *tokens = _TOKEN.findall(command)
        args = [t for t in tokens if "=" not in t]
        opts = dict(t.split("=", 1) for t in tokens if "=" in t)
        handler = getattr(self, "cmd_" + name.replace("-", "_"), None)
        if handler is None:
            raise ValueError(f"unknown command {name!r}")
        try:
            out: list[str] = handler(args, opts, given)
        except Exception as exc:  # the transcript shows what the core refused
            return [f"error: {type(exc).__name__}: {exc}"]
        return out or ["ok"]

    # -- set-up and time -------------------------------------------------------------------------

    def cmd_cluster(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        logs: dict[int, list[Entry]] = {}
        hard: dict[int, HardState] = {}
        for line in given:
            node_text, _, rest = line.partition(":")
            node = int(node_text)
            settings = dict(t.split("=", 1) for t in rest.split())
            if "log" in settings:
                epochs = [int(e) for part in settings["log"].split(",")
                          for e in _repeat(part)]
                logs[node] = batches(epochs)
            if "term" in settings:
                vote = settings.get("vote", "None")
                hard[node] = HardState(int(settings["term"]),
                                       None if vote == "None" else int(vote),
                                       int(settings.get("hw", "0")))
        self.cluster = Cluster(
            int(opts.get("n", "3")), logs=logs, hard=hard,
            max_append_bytes=int(opts.get("max-append-bytes", str(1 << 20))),
            max_inflight_appends=int(opts.get("max-inflight-appends", "64")),
            quiesce=opts.get("quiesce") == "true",
        )
        self.held, self.rounds, self.in_flight = [], {}, {}
        return self.cmd_state([], {}, [])

    def cmd_elect(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        node = int(args[0])
        self.c.elect(node, self._drop(opts))
        return self.cmd_state([], {}, [])

    def cmd_tick(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        node = int(args[0])
        for _ in range(int(opts.get("n", "1"))):
            self.c.cores[node].tick()
        return self.cmd_state(args, {}, [])

    def cmd_heartbeat(self, args: list[str], opts: dict[str, str], given: list[str]
                      ) -> list[str]:
        out: list[str] = []
        for _ in range(int(opts.get("n", "1"))):
            for core in self.c.cores.values():
                if core.role is Role.LEADER:
                    core.tick()
            out += self._settle(opts, [])
        return out

    def cmd_settle(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        pending: list[Message] = []
        if "release" in args:
            pending, self.held = self.held, []
        return self._settle(opts, pending)

    def _settle(self, opts: dict[str, str], pending: list[Message]) -> list[str]:
        out: list[str] = []
        trace = parse_filter(opts["trace"], self.c) if "trace" in opts else None
        drop = self._drop(opts)

        def watch(m: Message) -> bool:
            if drop(m):
                return True
            if trace is not None and trace(m):
                out.append(show_message(m))
                out.append("  at " + self._state_line(m.dst))
            return False

        self.c.settle(watch, pending=pending)
        return out

    def _drop(self, opts: dict[str, str]) -> Filter:
        """The ``drop`` filter, with the ``hold`` filter's messages kept for later."""
        drop = parse_filter(opts["drop"], self.c) if "drop" in opts else None
        hold = parse_filter(opts["hold"], self.c) if "hold" in opts else None

        def dropped(m: Message) -> bool:
            if hold is not None and hold(m):
                self.held.append(m)
                return True
            return drop is not None and drop(m)

        return dropped

    def cmd_propose(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        node, payloads = int(args[0]), [a.encode() for a in args[1:]]
        if opts.get("settle", "true") == "false":
            entries = [self.c.cores[node].propose(p, 1) for p in payloads]
        else:
            entries = self.c.propose(node, payloads, self._drop(opts))
        return [show_entries(entries)]

    def cmd_transfer(self, args: list[str], opts: dict[str, str], given: list[str]
                     ) -> list[str]:
        self.c.cores[int(args[0])].transfer_leadership(int(opts["to"]))
        return []

    def cmd_read(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        self.c.cores[int(args[0])].read_index(int(opts["ctx"]))
        return []

    def cmd_campaign(self, args: list[str], opts: dict[str, str], given: list[str]
                     ) -> list[str]:
        self.c.cores[int(args[0])].campaign()
        return self.cmd_state(args, {}, [])

    def cmd_defer_election(self, args: list[str], opts: dict[str, str], given: list[str]
                           ) -> list[str]:
        self.c.cores[int(args[0])].defer_election()
        return self.cmd_state(args, {}, [])

    def cmd_peer_down(self, args: list[str], opts: dict[str, str], given: list[str]
                      ) -> list[str]:
        self.c.cores[int(args[0])].peer_down(int(args[1]))
        return self.cmd_state(args[:1], {}, [])

    def cmd_restart(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        self.c.restart(int(args[0]))
        return self.cmd_state(args, {}, [])

    def cmd_retire(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        self.c.replicas[int(args[0])].retired = True
        return []

    def cmd_advance_log_start(self, args: list[str], opts: dict[str, str], given: list[str]
                              ) -> list[str]:
        for node in args:
            self.c.logs[int(node)].advance_log_start(int(opts["offset"]))
        return self.cmd_log(args, {}, [])

    def cmd_repeat(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        runs = [[line for command in given for line in self.run(command, [])]
                for _ in range(int(opts["n"]))]
        out: list[str] = []
        first = 0
        for i in range(1, len(runs) + 1):
            if i == len(runs) or runs[i] != runs[first]:
                span = f"{first + 1}" if i - first == 1 else f"{first + 1}-{i}"
                out.append(f"iteration {span}:")
                out += [f"  {line}" for line in runs[first]]
                first = i
        return out

    # -- messages, taken one by one --------------------------------------------------------------

    def cmd_step(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        core = self.c.cores[int(args[0])]
        for line in given:
            core.step(parse_message(line))
        return []

    def cmd_flush(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        sent = self.c.flush(int(args[0]))
        if "hold" in args:
            self.held += sent
        return [show_message(m) for m in sent] or ["no messages"]

    def cmd_begin(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        node = int(args[0])
        rnd = self.c.driver.begin([(node, self.c.replicas[node])])
        if rnd is None:
            return ["no Ready"]
        self.rounds[node] = rnd
        out: list[str] = []
        for write in rnd.writes:  # its messages show below, as they are sent
            out += [show_ready(write.rd)[0], f"  write term_vote={write.term_vote}"]
        early, self.c.port.early_hws[node] = self.c.port.early_hws[node], []
        if early:
            out.append("published before the write is durable: "
                       + " ".join(f"hw={hw}" for hw in early))
        out.append("sent before the write is durable:")
        return out + self._take_sent()

    def cmd_persist(self, args: list[str], opts: dict[str, str], given: list[str]
                    ) -> list[str]:
        rnd = self.rounds.pop(int(args[0]))
        for write in rnd.writes:
            write.persist()
        self.c.driver.complete(rnd)
        return ["sent once durable:", *self._take_sent()]

    def _take_sent(self) -> list[str]:
        sent, self.c.port.out = self.c.port.out, []
        return [f"  {show_message(m)}" for m in sent] or ["  nothing"]

    def cmd_ready(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        node = int(args[0])
        rd = self.in_flight[node] = self.c.cores[node].ready()
        return show_ready(rd)

    def cmd_advance(self, args: list[str], opts: dict[str, str], given: list[str]
                    ) -> list[str]:
        node = int(args[0])
        rd = self.in_flight.pop(node)
        rd.apply_log_writes(self.c.logs[node])
        self.c.cores[node].advance(rd)
        return self.cmd_state(args, {}, [])

    def cmd_prompt(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        messages = self.c.cores[int(args[0])].take_prompt_messages()
        if "deliver" in args:
            for m in messages:
                self.c.cores[m.dst].step(m)
        return [show_message(m) for m in messages] or ["no messages"]

    # -- what is there ---------------------------------------------------------------------------

    def _nodes(self, args: list[str]) -> list[int]:
        return [int(a) for a in args] or self.c.ids

    def _state_line(self, node: int) -> str:
        core = self.c.cores[node]
        line = (f"{node}: {core.role.value} term={core.term} leader={core.leader_id} "
                f"hw={core.high_watermark} log=[{core.log_start_offset},{core.log_end_offset})")
        if core.transferring_to is not None:
            line += f" transferring-to={core.transferring_to}"
        if core.damaged:
            line += " damaged"
        if core.quiesced:
            line += " quiesced"
        return line

    def cmd_state(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        return [self._state_line(n) for n in self._nodes(args)]

    def cmd_log(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        return [f"{n}: {show_entries(self.c.logs[n].entries)} "
                f"start={self.c.logs[n].log_start_offset}" for n in self._nodes(args)]

    def cmd_held(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        return [show_message(m) for m in self.held] or ["nothing held"]

    def cmd_readies(self, args: list[str], opts: dict[str, str], given: list[str]
                    ) -> list[str]:
        """The log resets and truncations node I's published Readies asked for, in order."""
        out = []
        for rd in self.c.readies[int(args[0])]:
            if rd.reset_to is not None:
                out.append(f"reset_to={rd.reset_to}")
            if rd.truncate_to is not None:
                out.append(f"truncate_to={rd.truncate_to}")
        return out or ["no resets or truncations"]

    def cmd_published(self, args: list[str], opts: dict[str, str], given: list[str]
                      ) -> list[str]:
        """The high watermark of each Ready published for node I, in order."""
        published = self.c.readies[int(args[0])]
        return [" ".join(f"hw={rd.high_watermark}" for rd in published) or "nothing published"]

    def cmd_reads(self, args: list[str], opts: dict[str, str], given: list[str]) -> list[str]:
        """The reads confirmed and failed in node I's published Readies, in order."""
        out = [" ".join(_show_reads(rd)) for rd in self.c.readies[int(args[0])]
               if rd.read_states or rd.failed_reads]
        return out or ["no reads answered"]

    def cmd_leaderships(self, args: list[str], opts: dict[str, str], given: list[str]
                        ) -> list[str]:
        changes = self.c.port.leaderships[int(args[0])]
        return [f"term={ch.term} " + ("stopped leading" if ch.epoch_start is None
                                      else f"leads, epoch starts at {ch.epoch_start}")
                for ch in changes] or ["never led"]


def _repeat(part: str) -> Iterator[str]:
    value, _, count = part.partition("*")
    yield from [value] * int(count or "1")


def replay(path: Path) -> tuple[list[Block], list[list[str]], list[str]]:
    """Every block of the transcript, what it produced, and the trailing prose."""
    blocks, tail = parse(path.read_text())
    transcript = Transcript()
    outputs = [transcript.run(b.command, b.input) for b in blocks]
    return blocks, outputs, tail

