"""Every file of the repository that the README or a docs page names must exist.

The docs name source files by their paths (`node/replicas/partition.py`) so that a reader can
follow the text into the code; `mkdocs build --strict` checks links but not these. A file
renamed or moved without its pages would leave a newcomer looking for a file that is not
there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL = ("node", "storage", "replication", "coordinator", "tidelog", "chaos", "tests",
             "scripts", "bench", "deploy", "proto", "examples", "docs", ".ci")
# A path in backticks: a top-level folder, then a file name with an extension. Placeholders
# (`<offset>.snapshot`, `test_fuzz_*.py`, `node-{1,2,3}.properties`) are not files.
_FOLDERS = "|".join(re.escape(top) for top in TOP_LEVEL)
PATH = re.compile(r"`((?:" + _FOLDERS + r")/[\w./-]+\.\w+)`")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def missing_paths(files: list[Path]) -> list[str]:
    """`file: path` for each named repository path that does not exist."""
    return [f"{doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc}: {name}"
            for doc in files
            for name in PATH.findall(doc.read_text())
            if not (ROOT / name).exists()]


def test_the_pattern_finds_paths_and_skips_placeholders(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("`node/replicas/partition.py` and `storage/nowhere.py`, not "
                    "`<offset>.snapshot`, `tests/*/test_fuzz_*.py` or "
                    "`deploy/systemd/node-{1,2,3}.properties`")
    assert missing_paths([page]) == [f"{page}: storage/nowhere.py"]


def test_every_path_the_docs_name_exists() -> None:
    assert missing_paths(documents()) == []
