"""The server packages have generic names; a stray install of, say, a PyPI `node` must never
shadow ours, and proto/ must stay a folder of .proto sources (SPEC §2)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["node", "replication", "storage", "coordinator", "chaos"])
def test_server_package_resolves_inside_repository(name: str) -> None:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, f"{name} is not importable"
    origin = Path(spec.origin).resolve()
    assert origin.is_relative_to(REPO), f"{name} resolves to {origin}, outside {REPO}"


def test_proto_is_not_a_python_package() -> None:
    proto = REPO / "proto"
    assert proto.is_dir()
    python_files = sorted(p.name for p in proto.rglob("*.py"))
    assert python_files == [], f"proto/ must hold .proto sources only, found {python_files}"


def test_importing_tidelog_pulls_in_no_server_package() -> None:
    import subprocess
    import sys

    code = (
        "import sys, tidelog, tidelog.errors, tidelog.records;"
        "bad = [m for m in ('node', 'replication', 'storage', 'coordinator', 'chaos', 'pyspark')"
        " if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
