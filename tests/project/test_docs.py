"""The docs stay the project's own and in step with the code: every `contract §x.y` and
`kafka-mapping §x.y` citation names a section that docs/reference/contract.md or
docs/reference/kafka.md has, nothing points at documents outside the repository, and the
generated reference pages (docs/hooks.py) list every error code, node setting and topic config,
each with a description."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from types import ModuleType

from tidelog import errors
from tidelog.node.config import KEYS
from tidelog.storage.config import LogConfig

REPO = Path(__file__).resolve().parents[2]
PAGES = {
    "contract": REPO / "docs" / "reference" / "contract.md",
    "kafka-mapping": REPO / "docs" / "reference" / "kafka.md",
}
_SUFFIXES = {".py", ".md", ".proto", ".sh", ".toml", ".yml", ".yaml", ".txt", ".cfg"}
_SKIP_DIRS = {".git", ".venv", "site", "build", "__pycache__", ".hypothesis", ".mypy_cache",
              ".pytest_cache", ".ruff_cache", "tidelog.egg-info", "bench-out", "chaos-out",
              "pipeline-out", "tidelog-data", "spark-warehouse", "metastore_db"}
_NUMBER = r"\d+(?:\.\d+)*"
#: "contract §6.2", "kafka-mapping §2.5, §2.6, §3", "kafka-mapping §8.9-8.10", also when a
#: line break (and a comment marker) falls between the name and the section.
_CITATION = re.compile(
    rf"\b(contract|kafka-mapping)[\s#/*]*§({_NUMBER}(?:\s*(?:,|-|–|and)\s*§?{_NUMBER})*)"
)
_HEADING = re.compile(rf"^#{{2,4}} §({_NUMBER})\b", re.M)


def _repo_files() -> list[Path]:
    """The tree's text files, each once (the tidelog/node-style symlinks are not followed)."""
    found = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not (Path(root) / d).is_symlink()]
        found += [Path(root) / name for name in files if Path(name).suffix in _SUFFIXES]
    return found


def _sections(page: Path) -> set[str]:
    return set(_HEADING.findall(page.read_text()))


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_citation_names_a_section_of_its_page() -> None:
    sections = {name: _sections(page) for name, page in PAGES.items()}
    assert all(sections.values()), "a reference page has no numbered sections"
    missing = []
    cited = 0
    for path in _repo_files():
        for match in _CITATION.finditer(path.read_text(errors="replace")):
            for number in re.findall(_NUMBER, match.group(2)):
                cited += 1
                if number not in sections[match.group(1)]:
                    line = path.read_text(errors="replace").count("\n", 0, match.start()) + 1
                    missing.append(f"{path.relative_to(REPO)}:{line}: {match.group(0)!r}")
    assert cited > 100, f"only {cited} citations found: is the pattern still right?"
    assert missing == [], "citations of sections the pages do not have:\n" + "\n".join(missing)


def test_nothing_points_outside_the_repository() -> None:
    """The contract and the Kafka mapping are pages of docs/; the documents they were written
    from are not part of a clone."""
    outside = re.compile(
        r"\.\./shared/|\bSPEC(?:\.md|\s*§)|kafka-reference|design-notes|\b[Ss]eeds? 00\d\b"
    )
    found = [
        f"{path.relative_to(REPO)}: {match.group(0)!r}"
        for path in _repo_files() if path != Path(__file__).resolve()
        for match in outside.finditer(path.read_text(errors="replace"))
    ]
    assert found == []


def test_the_error_codes_page_lists_every_code() -> None:
    page = _hooks().errors_page()
    for cls in errors.all_errors():
        assert f"| {cls.code} | `{cls.name}` | `{cls.__name__}` |" in page
    assert "`ConfigurationError`" in page and "`NodeUnavailableError`" in page


def test_the_configuration_page_lists_every_setting_with_a_description() -> None:
    hooks = _hooks()
    docs = hooks.setting_docs()
    undocumented = [key for key, name in KEYS.items() if not docs.get(name)]
    assert undocumented == [], "node settings without a #: comment in NodeConfig"
    page = hooks.configuration_page()
    for key in (*KEYS, *LogConfig.property_names()):
        assert f"| `{key}` |" in page, key
    table = page[page.index("| key | default | values | description |"):]
    topic_rows = table.splitlines()[2:]
    assert len(topic_rows) == len(LogConfig.property_names())
    assert all(line.count("|") == 5 and " |  |" not in line for line in topic_rows)
