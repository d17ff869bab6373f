"""What a node keeps under its data dir is its owner's alone: directories 0700, files 0600,
created so rather than tightened afterwards, whatever the umask (these tests run with umask 0,
under which a file created without an explicit mode is 0666). A data dir found looser at start
is reported and tightened.

Before, data directories were 0755 and segments 0644: any local user could read payloads."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from storage_helpers import FakeClock, open_log

from tidelog.records import RecordInput, build_batch
from tidelog.storage.cleaner import LogCleaner
from tidelog.testing import LocalCluster, Raw, wait_for


@contextmanager
def _umask(mask: int) -> Iterator[None]:
    """The process's umask for the block (node processes started in it inherit it)."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _not_private(root: Path) -> list[str]:
    """Each directory under `root` (itself included) whose mode is not 0700 and each file whose
    mode is not 0600, with its mode. Files a running node deletes meanwhile are skipped."""
    found = []
    for directory, _, files in os.walk(root):
        wanted = [(Path(directory), 0o700), *((Path(directory, f), 0o600) for f in files)]
        for path, mode in wanted:
            try:
                actual = stat.S_IMODE(path.lstat().st_mode)
            except FileNotFoundError:
                continue
            if actual != mode:
                found.append(f"{path.relative_to(root.parent)}: {actual:04o}")
    return found


def _acknowledged(raw: Raw, topic: str, batch: bytes) -> bool:
    return raw.produce(1, topic, 0, batch).error_code == 0


def test_a_log_creates_its_directory_and_every_file_private(tmp_path: Path) -> None:
    """Segments, indexes, the transaction index, checkpoints, producer snapshots, the clean
    shutdown marker, and what the cleaner writes."""
    with _umask(0):
        log = open_log(tmp_path / "t-0", FakeClock(), segment_bytes=400,
                       cleanup_policy="compact")
        for i in range(20):
            log.append_as_leader(
                build_batch([RecordInput(b"v" * 40, b"k%d" % (i % 3), 0)], producer_id=7,
                            producer_epoch=0, base_sequence=i), 0)
        log.update_high_watermark(log.log_end_offset)
        LogCleaner(log).clean(0, log.log_end_offset)
        log.checkpoint()
        log.close()
        reopened = open_log(tmp_path / "t-0", FakeClock(), segment_bytes=400)
        reopened.close()
    names = {p.suffix for p in (tmp_path / "t-0").iterdir()}
    assert {".log", ".index", ".timeindex", ".snapshot"} <= names, names
    assert _not_private(tmp_path / "t-0") == []


def test_a_node_keeps_its_data_dir_and_every_file_in_it_private(tmp_path: Path) -> None:
    with _umask(0), LocalCluster(1, data_dir=tmp_path / "cluster", segment_bytes=1024,
                                log_retention_check_interval_ms=200) as cluster, \
            Raw(cluster) as raw:
        raw.create_topic("plain", 2, 1)
        raw.create_topic("compacted", 1, 1, cleanup_policy="compact")
        raw.produce_acknowledged("plain", 0, [[b"v%d" % i] * 5 for i in range(30)])
        for i in range(30):
            keyed = build_batch([RecordInput(b"v" * 100, b"k%d" % (i % 3), 0)])
            wait_for(partial(_acknowledged, raw, "compacted", keyed), 30,
                     f"batch {i} of compacted-0 acknowledged")
        node_dir = cluster.node_dir(1)
        assert {p.name for p in node_dir.iterdir()} >= {"plain-0", "compacted-0"}
        assert _not_private(node_dir) == []
        assert cluster.stop(1) == 0  # a clean shutdown writes checkpoints, snapshots, markers
        assert _not_private(node_dir) == []


def test_a_node_reports_and_tightens_a_data_dir_others_may_read(tmp_path: Path) -> None:
    node_dir = tmp_path / "cluster" / "node-1"
    node_dir.mkdir(parents=True)
    node_dir.chmod(0o755)
    with LocalCluster(1, data_dir=tmp_path / "cluster") as cluster:
        wait_for(lambda: "had mode 0755" in cluster.logs(1), 30, "the warning")
        assert "other local users could read the records in it; changed to 0700" in \
            cluster.logs(1)
        assert stat.S_IMODE(node_dir.stat().st_mode) == 0o700
