"""mkdocs hook: the reference pages that are generated from the code at every build.

`reference/errors.md` comes from `tidelog.errors` and `reference/configuration.md` from the
node's settings (`tidelog.node.config`, each setting's ``#:`` comment) and the topic configs
(`tidelog.storage.config`). They are never written to the tree, so they cannot drift from the
code: a setting or error code added there is on the site at the next build.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from tidelog import errors
from tidelog.node import config as node_config
from tidelog.storage.config import topic_config_docs

ERRORS_PAGE = "reference/errors.md"
CONFIG_PAGE = "reference/configuration.md"
_LONG_MAX = 2**63 - 1
_INT_MAX = 2**31 - 1


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Adds the generated pages to the build, as if they were files under docs/."""
    for path, content in ((ERRORS_PAGE, errors_page()), (CONFIG_PAGE, configuration_page())):
        files.append(File.generated(config, path, content=content))
    return files


# ---- error codes ---------------------------------------------------------------------------

def _category(cls: type[errors.TidelogError]) -> str:
    """The category a client acts on, most specific first (see tidelog.errors)."""
    for base, label in (
        (errors.InvalidMetadataError, "retriable, refresh metadata"),
        (errors.StaleCoordinatorError, "retriable, find the coordinator"),
        (errors.RetriableError, "retriable"),
        (errors.AuthorizationError, "not allowed"),
        (errors.AuthenticationError, "not authenticated"),
    ):
        if issubclass(cls, base):
            return label
    return "final"


def _cell(text: str) -> str:
    """One table cell: a single line, with the table's separator escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def errors_page() -> str:
    """Every Kafka error code Tidelog knows, then the client's own errors."""
    lines = [
        "# Error codes",
        "",
        "Every error is a class of `tidelog.errors`, one per Kafka error code with Kafka's",
        "number and name; the categories are base classes, so a program can catch",
        "`RetriableError` or `AuthorizationError` as a whole. Answers carry the code per",
        "partition (contract §5); the client raises the class. This page is generated from",
        "`tidelog/errors.py` at every build.",
        "",
        "| category | base class | what the client does |",
        "|---|---|---|",
        "| retriable, refresh metadata | `InvalidMetadataError` | refreshes metadata, then "
        "retries |",
        "| retriable, find the coordinator | `StaleCoordinatorError` | finds the coordinator "
        "again, then retries |",
        "| retriable | `RetriableError` | retries after a backoff |",
        "| not allowed / not authenticated | `AuthorizationError` / `AuthenticationError` | "
        "raises; never retried |",
        "| final | `TidelogError` | raises |",
        "",
        "## Kafka error codes",
        "",
        "| code | name | class | category | meaning |",
        "|---:|---|---|---|---|",
    ]
    for cls in errors.all_errors():
        lines.append(
            f"| {cls.code} | `{cls.name}` | `{cls.__name__}` | {_category(cls)} | "
            f"{_cell(cls.description)} |"
        )
    lines += [
        "",
        "## Errors of the client",
        "",
        "Raised by the client itself, not answered by a node.",
        "",
        "| name | class | category | meaning |",
        "|---|---|---|---|",
    ]
    coded = set(errors.all_errors())
    own = sorted(
        (cls for cls in vars(errors).values()
         if isinstance(cls, type) and issubclass(cls, errors.TidelogError)
         and cls not in coded and cls is not errors.TidelogError
         and cls.__module__ == errors.__name__
         and "name" in vars(cls)),
        key=lambda cls: cls.name,
    )
    for cls in own:
        doc = inspect.getdoc(cls) or cls.description
        lines.append(
            f"| `{cls.name}` | `{cls.__name__}` | {_category(cls)} | "
            f"{_cell(doc.split(chr(10) + chr(10))[0])} |"
        )
    return "\n".join(lines) + "\n"


# ---- configuration ---------------------------------------------------------------------------

def setting_docs() -> dict[str, str]:
    """Each NodeConfig field's description: the ``#:`` comment block above it. A block
    describes the fields that follow it up to the next block or section comment, so a group
    of settings (the two liveness timers, the consumer-group limits) shares one text."""
    source = textwrap.dedent(inspect.getsource(node_config.NodeConfig))
    comments: dict[int, str] = {}
    for number, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#:"):
            comments[number] = stripped[2:].strip()
        elif stripped.startswith("#"):
            comments[number] = ""  # a section comment ends the block above it
    docs: dict[str, str] = {}
    current = ""
    last_line = 0
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    for statement in body.body:
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            continue
        block = [comments[n] for n in range(last_line + 1, statement.lineno) if n in comments]
        if block:
            if "" in block:  # a section comment: only what follows it counts
                block = block[len(block) - block[::-1].index(""):]
            current = " ".join(block)
        docs[statement.target.id] = current
        last_line = statement.end_lineno or statement.lineno
    return docs


def _show(value: Any) -> str:
    """A default as one writes it in a properties file."""
    if value is None or value == "" or value == {} or value == ():
        return "(empty)"
    if isinstance(value, bool):
        return str(value).lower()
    if value == _LONG_MAX:
        return "2^63 - 1 (no limit)"
    if value == _INT_MAX:
        return "2^31 - 1 (no limit)"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        return _show(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return _show(field.default_factory())
    return "required"


def configuration_page() -> str:
    """Every node setting (NodeConfig's keys) and every topic config, with defaults."""
    fields = {field.name: field for field in dataclasses.fields(node_config.NodeConfig)}
    docs = setting_docs()
    lines = [
        "# Configuration",
        "",
        "Generated from `node/config.py` and `storage/config.py` at every build. Settings use",
        "Kafka's names where Kafka has the setting; a node reads them from a properties file",
        "(`--config`), from `--set key=value`, or as keyword arguments of `LocalCluster`",
        "(`segment_bytes=...`). A key that is not a node setting is a topic default: the value",
        "topics created without an override get (see [topic configs](#topic-configs)).",
        "",
        "## Node settings",
        "",
        "Settings marked *dynamic* may be changed while the nodes run, with",
        "`IncrementalAlterConfigs` on a node (or on every node's default).",
        "",
        "| key | default | description |",
        "|---|---|---|",
    ]
    tests: list[str] = []
    for key, name in node_config.KEYS.items():
        field = fields[name]
        default = "required" if key in ("listen", "data.dir") else _default(field)
        if key == "node.id":
            default = "required (unless the node joins)"
        dynamic = " *Dynamic.*" if key in node_config.DYNAMIC_KEYS else ""
        row = f"| `{key}` | `{default}` | {_cell(docs.get(name, ''))}{dynamic} |"
        (tests if key.startswith("test.") else lines).append(row)
    lines += [
        "",
        "### Test hooks",
        "",
        "For the test suite and chaos runs only: planted bugs and fault injection that the",
        "checkers must catch. Never set them on a cluster that holds data you want.",
        "",
        "| key | default | description |",
        "|---|---|---|",
        *tests,
        "",
        "## Topic configs",
        "",
        "Set per topic at creation (`tidelog topic create --config KEY=VALUE`,",
        "`create_topic(config=...)`) or later (`IncrementalAlterConfigs`); a topic without",
        "an override takes the node's topic default, else the default below (Kafka's).",
        "An unknown key is refused with `INVALID_CONFIG`.",
        "",
        "| key | default | values | description |",
        "|---|---|---|---|",
    ]
    for doc in topic_config_docs():
        default = _show(int(doc.default)) if doc.default.lstrip("-").isdigit() else doc.default
        values = doc.values.replace(str(_LONG_MAX), "2^63 - 1").replace(str(_INT_MAX), "2^31 - 1")
        lines.append(f"| `{doc.name}` | `{default}` | {_cell(values)} | {_cell(doc.doc)} |")
    return "\n".join(lines) + "\n"
