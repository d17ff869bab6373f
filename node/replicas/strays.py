"""Replica directories nothing assigns to this node any more (Kafka's stray logs), and the one
way a replica's directory is deleted.

A node deletes a replica's files when it applies the metadata record that takes the replica
away (a deleted topic, a reassignment that left the node out). Two cases escape that: a node
killed between applying such a record and deleting the files, and a node that was down while
the record committed and then applied it in the same pass as the record that had assigned the
replica (a node outside the controller's quorum replays the metadata from the start; a node
that was down long pulls many records at once): it never opened the replica, so it never
removes it either. Such a directory is never opened again, holds disk space for good, and under
the same name would look like the replica of a partition created later.

Which directories are strays can only be told from metadata that holds every record committed
before the node started, or a replica assigned here by a record the node has not applied yet
would be taken for one and deleted: the only copy of its data on this node, counted in its
group's majority. So the sweep runs once per start, after the node's image caught up with the
controller leader's metadata high watermark (`tidelog.node.cluster.registration`, in a heartbeat's
answer), as Kafka looks for stray logs only once a broker has caught up with the metadata log.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Collection
from pathlib import Path

from tidelog.replication.term_votes import TermVotes
from tidelog.storage.segment import LOG_SUFFIX

log = logging.getLogger("tidelog.node")

#: What a replica's directory is renamed to while it is deleted: a deletion cut short by a
#: crash leaves this name, which the next sweep finishes.
DELETED_SUFFIX = ".deleted"
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def delete_directory(directory: Path) -> None:
    """Delete a replica's directory: renamed first, so that a crash midway leaves a name no
    replica is opened under (`DELETED_SUFFIX`), never a half-deleted log under its own."""
    doomed = directory.with_name(f"{directory.name}{DELETED_SUFFIX}")
    shutil.rmtree(doomed, ignore_errors=True)
    directory.rename(doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def stray_directories(data_dir: Path, keep: Collection[str]) -> list[Path]:
    """The replica directories of `data_dir` whose names are not in `keep`, and deletions cut
    short. A directory counts as a replica's only when it is named ``<topic>-<partition>``
    and holds a segment file: nothing else an operator keeps in the data dir is touched."""
    strays = []
    for path in sorted(data_dir.iterdir()):
        if not path.is_dir() or path.name in keep:
            continue
        if path.name.endswith(DELETED_SUFFIX) or (
            _PARTITION_DIR.match(path.name) and any(path.glob(f"*{LOG_SUFFIX}"))
        ):
            strays.append(path)
    return strays


def delete_strays(data_dir: Path, keep: Collection[str], term_votes: TermVotes) -> list[str]:
    """On the disk thread: delete every stray directory (`stray_directories`), their terms and
    votes out of the book first (a group created again under the same name starts with no
    term). Returns the names deleted."""
    strays = stray_directories(data_dir, keep)
    for path in strays:
        term_votes.forget(path.name)
    term_votes.sync()
    deleted = []
    for path in strays:
        try:
            if path.name.endswith(DELETED_SUFFIX):
                shutil.rmtree(path)
            else:
                delete_directory(path)
        except OSError as exc:
            log.warning("%s: stray replica directory not deleted: %s", path, exc)
            continue
        log.info("%s: deleted a replica directory no metadata assigns here", path.name,
                 extra={"event": "stray_replica_deleted", "directory": path.name})
        deleted.append(path.name)
    return deleted
