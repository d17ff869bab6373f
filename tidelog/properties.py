"""Java-style properties files: a node's config (``tidelog node --config``) and the CLI's
``--command-config``, as Kafka's tools read them."""

from __future__ import annotations

import re
from pathlib import Path

from tidelog.errors import InvalidConfigError


def read_properties(path: Path) -> dict[str, str]:
    """Reads a Java-style properties file: ``key=value`` or ``key: value``, ``#``/``!``
    comments. Line continuations and escapes are not supported; no setting needs them."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    props: dict[str, str] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = re.fullmatch(r"([^=:\s]+)\s*[=:]\s*(.*)", line)
        if match is None:
            raise InvalidConfigError(f"{path}:{number}: expected key=value, got {line!r}")
        props[match.group(1)] = match.group(2)
    return props
