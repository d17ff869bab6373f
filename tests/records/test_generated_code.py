"""The generated gRPC modules in tidelog/v1 must be exactly what scripts/gen-proto.sh makes
from proto/ now: an edited .proto with stale Python would ship a protocol nobody serves."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_generated_modules_are_up_to_date(tmp_path: Path) -> None:
    subprocess.run(
        ["bash", str(REPO / "scripts" / "gen-proto.sh"), str(tmp_path)],
        check=True,
        env={"PY": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert fresh, "gen-proto.sh generated nothing"
    committed_dir = REPO / "tidelog"
    committed = sorted(
        p.relative_to(REPO)
        for p in committed_dir.rglob("*_pb2*")
        if p.is_file() and p.suffix in {".py", ".pyi"}
    )
    assert committed == fresh, "generated files differ from the committed set"
    stale = [str(p) for p in fresh if not filecmp.cmp(tmp_path / p, REPO / p, shallow=False)]
    assert stale == [], f"stale generated code, run scripts/gen-proto.sh: {stale}"


def test_every_proto_field_has_a_comment() -> None:
    """Every field line in a message is preceded by a // comment line (the issue's rule)."""
    missing = []
    for proto in sorted((REPO / "proto").rglob("*.proto")):
        lines = proto.read_text().splitlines()
        depth = 0
        for number, line in enumerate(lines):
            stripped = line.strip()
            if stripped.startswith(("message ", "service ", "enum ", "oneof ")):
                depth += 1
                continue
            if stripped == "}":
                depth -= 1
                continue
            is_field = depth > 0 and stripped.endswith(";") and "=" in stripped
            if is_field and not lines[number - 1].strip().startswith("//"):
                missing.append(f"{proto.name}:{number + 1}: {stripped}")
    assert missing == []
