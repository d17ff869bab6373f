"""Stray replica directories (`tidelog.node.replicas.strays`): which directories of a data dir
count as strays, and that their deletion takes their terms out of the book first."""

from __future__ import annotations

from pathlib import Path

from tidelog.node.replicas.strays import delete_strays, stray_directories
from tidelog.replication.term_votes import TERM_VOTES_FILE, TermVotes


def _replica_dir(data_dir: Path, name: str) -> Path:
    directory = data_dir / name
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(b"")
    (directory / "00000000000000000000.index").write_bytes(b"")
    return directory


def test_only_unassigned_replica_directories_and_cut_short_deletions_are_strays(
    tmp_path: Path,
) -> None:
    _replica_dir(tmp_path, "kept-0")
    _replica_dir(tmp_path, "gone-3")
    _replica_dir(tmp_path, "with-dashes-in-it-12")
    (tmp_path / "half-1.deleted").mkdir()
    (tmp_path / "operator-notes").mkdir()  # no segment: not a replica's
    (tmp_path / "empty-0").mkdir()  # no segment either
    (tmp_path / "not-a-dir-0").write_text("x")
    (tmp_path / "meta.properties").write_text("node.id=1\n")
    strays = stray_directories(tmp_path, {"kept-0"})
    assert [p.name for p in strays] == ["gone-3", "half-1.deleted", "with-dashes-in-it-12"]


def test_deleting_strays_forgets_their_terms_and_keeps_the_rest(tmp_path: Path) -> None:
    _replica_dir(tmp_path, "kept-0")
    _replica_dir(tmp_path, "gone-3")
    (tmp_path / "half-1.deleted" / "sub").mkdir(parents=True)
    book = TermVotes(tmp_path / TERM_VOTES_FILE)
    book.set("kept-0", (4, 1))
    book.set("gone-3", (9, 2))
    book.sync()
    assert delete_strays(tmp_path, {"kept-0"}, book) == ["gone-3", "half-1.deleted"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept-0", TERM_VOTES_FILE]
    reread = TermVotes(tmp_path / TERM_VOTES_FILE)
    assert reread.get("kept-0") == (4, 1)
    assert reread.get("gone-3") is None
