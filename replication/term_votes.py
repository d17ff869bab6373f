"""The term and vote of every Raft group of a node, in one file.

Raft's promise (Figure 2 of the paper): a replica's current term and its vote are on stable
storage before it answers anything in that term, above all before a vote leaves: a vote
forgotten in a crash lets the replica vote again in the same term, for another candidate, and
two leaders of one term can follow. Kept in a file per group, as before, every election cost
each replica a file replacement and two fsyncs (the file's and its directory's), and a node
electing the leaders of a new topic of 1,000 partitions did thousands of them.

Here every group's term and vote live in one checkpoint file per node (``raft-states`` in the
data directory, a ``<log directory name> <term> <vote>`` line per group). The driver's round of
writes (`tidelog.replication.driver`) first applies every Ready (`TermVotes.set`, in memory),
then syncs each replica's store: the first `TermVotes.sync` of the round rewrites the file with
every group's state set so far, the others find nothing new, so a round costs one file
replacement however many groups changed term in it. Only after the whole round is synced does
the driver send what it promised: the votes, the acknowledgements, anything of a new term.

Why nothing granted is lost in a crash: the file is replaced whole (`CheckpointFile.write`: a
temporary file written and fsynced, renamed over the old one, the directory fsynced). A crash
before the rename leaves the old file, which lacks only states of the round being written, and
that round sent none of its promises (it had not completed). A crash after the directory fsync
keeps the new one. There is no state between: the rename is atomic. A `sync` that fails leaves
the states unsynced (the next `sync` writes them again) and raises, so the caller fails the
round (`ReplicaSet.storage_failed`), which then sends nothing. `sync` is called by several
threads of a round at once (the node's flush helpers): a sync that returns has written a file
holding every state `set` before it began (writes are serialized; a state set while another
write was under way marks the book to be written again).

Directories written before this file existed keep their state in a ``raft-state`` file of
their own: `LogStore.hard_state` reads it for a group the book does not know yet, so an upgrade
forgets no vote.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from tidelog.replication.driver import TermVote
from tidelog.storage import CheckpointFile

_logger = logging.getLogger(__name__)

TERM_VOTES_FILE = "raft-states"


class TermVotes:
    """The (term, vote) of each group of a node, by the name of the group's log directory."""

    def __init__(self, path: Path) -> None:
        self._file = CheckpointFile(path, version=0, width=3, named=True)
        self._states: dict[str, TermVote] = {}
        for name, term, vote in self._file.read() or []:
            t, v = int(term), int(vote)
            if t < 0 or v < -1 or name in self._states:
                _logger.warning("%s: ignoring the invalid entry %s %s %s", path, name, term, vote)
                continue
            self._states[name] = (t, None if v < 0 else v)
        #: Each state's line of the file, kept from `set` to `sync`: formatting every group's
        #: line at each sync cost 15 ms of CPU per round with an election at 5,000 groups, and
        #: a third of a loaded node's GIL time while they were being elected (py-spy --gil).
        self._lines = {name: _line(name, state) for name, state in self._states.items()}
        #: Guards ``_states``, ``_lines`` and ``_dirty``; ``_writing`` serializes the writes.
        self._lock = threading.Lock()
        self._writing = threading.Lock()
        self._dirty = False

    @property
    def path(self) -> Path:
        return self._file.path

    def get(self, name: str) -> TermVote | None:
        with self._lock:
            return self._states.get(name)

    def set(self, name: str, term_vote: TermVote) -> None:
        """Record a group's new term and vote; durable once a `sync` that began after returns."""
        if not name or any(c.isspace() for c in name):
            raise ValueError(f"a group name cannot be {name!r}")
        with self._lock:
            self._states[name] = term_vote
            self._lines[name] = _line(name, term_vote)
            self._dirty = True

    def forget(self, name: str) -> None:
        """A group whose replica is deleted: gone from the file at the next `sync`, which must
        come before its directory goes (a group created again under the same name starts
        with no term)."""
        with self._lock:
            if self._states.pop(name, None) is not None:
                del self._lines[name]
                self._dirty = True

    def sync(self) -> None:
        """Make every state set so far durable (nothing to do when the file holds them)."""
        with self._writing:
            with self._lock:
                if not self._dirty:
                    return
                rows = list(self._lines.values())
                self._dirty = False
            try:
                self._file.write_lines(rows)
            except BaseException:
                with self._lock:
                    self._dirty = True
                raise


def _line(name: str, term_vote: TermVote) -> str:
    term, vote = term_vote
    return f"{name} {term} {-1 if vote is None else vote}"
