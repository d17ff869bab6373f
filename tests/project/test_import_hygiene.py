"""One namespace: the repository keeps node/, replication/, storage/, coordinator/ and chaos/ at
the top, linked into the `tidelog` package, so that `pip install tidelog` puts exactly one
top-level package into site-packages and nothing called `node` or `storage` can shadow (or be
shadowed by) a stranger's package. proto/ stays a folder of .proto sources (contract §2)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = ["node", "replication", "storage", "coordinator", "chaos"]


@pytest.mark.parametrize("name", SERVER_PACKAGES)
def test_server_package_is_the_top_level_folder_under_the_tidelog_namespace(name: str) -> None:
    spec = importlib.util.find_spec(f"tidelog.{name}")
    assert spec is not None and spec.origin is not None, f"tidelog.{name} is not importable"
    assert Path(spec.origin).resolve() == (REPO / name / "__init__.py").resolve()


def test_proto_is_not_a_python_package() -> None:
    proto = REPO / "proto"
    assert proto.is_dir()
    python_files = sorted(p.name for p in proto.rglob("*.py"))
    assert python_files == [], f"proto/ must hold .proto sources only, found {python_files}"


@pytest.mark.parametrize("modules", [
    "tidelog, tidelog.errors, tidelog.records",
    "tidelog.cli",  # the CLI's server commands import the servers when they run
    "tidelog.testing",  # it starts nodes as processes, importing their config only to do so
])
def test_importing_the_client_side_pulls_in_no_server_package(modules: str) -> None:
    servers = (*(f"tidelog.{name}" for name in SERVER_PACKAGES), "pyspark")
    code = (
        f"import sys, {modules};"
        f"bad = [m for m in {servers!r} if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_wheel_holds_one_top_level_package_and_builds_without_warnings(
    tmp_path: Path,
) -> None:
    # From a copy: setuptools keeps build/ in the source tree, and a stale one would leak in.
    source = tmp_path / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache", "tidelog-data*"))
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v",
         "--disable-pip-version-check", "-w", str(tmp_path), str(source)],
        capture_output=True, text=True, timeout=180,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    output = result.stdout + result.stderr
    warning = re.search(r"(?i)^.*warning.*deprecat.*$", output, re.MULTILINE)
    assert warning is None, warning.group(0)
    (wheel,) = tmp_path.glob("tidelog-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
        names = set(archive.namelist())
    assert {t for t in tops if not t.endswith(".dist-info")} == {"tidelog"}
    for name in SERVER_PACKAGES:
        assert f"tidelog/{name}/__init__.py" in names
