"""deploy/ stays working: the systemd unit's ExecStart and the compose services' commands are
parsed as the `tidelog` command line parses them, with the properties files they name (for
the unit, each host's file installed at its path; for compose, the file each service mounts),
and NodeConfig must accept each and the three must describe one consistent 3-node cluster.
The Dockerfile's entry point, data volume and ports are checked against the same files (no
image is built: Docker is not needed to run the suite)."""

from __future__ import annotations

import configparser
import json
import re
import shlex
from pathlib import Path

import yaml

from tidelog.cli import build_parser
from tidelog.commands.node import node_config
from tidelog.node.config import NodeConfig

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CONFIG_PATH = "/etc/tidelog/node.properties"


def config_of(argv: list[str], mounts: dict[str, Path]) -> NodeConfig:
    """The config a node started with `argv` (after `tidelog`) gets, the container or host
    paths in it read from where `mounts` says they come from."""
    args = build_parser().parse_args([str(mounts.get(a, a)) for a in argv])
    assert args.command == "node", argv
    return node_config(args)


def check_cluster(configs: dict[int, NodeConfig]) -> None:
    """What three nodes must agree on: ids, one peers list, each node bound where the others
    dial it, and every node's client address as the others publish it."""
    assert sorted(configs) == [1, 2, 3]
    peers = {n: dict(c.peers) for n, c in configs.items()}
    assert peers[1] == peers[2] == peers[3], "every node lists the same peers"
    assert sorted(peers[1]) == [1, 2, 3]
    for n, config in configs.items():
        assert config.node_id == n
        own_port = config.internal_listen.rpartition(":")[2]
        assert peers[1][n].rpartition(":")[2] == own_port, f"node {n} binds where peers say"
        for other, other_config in configs.items():
            if other != n:
                assert config.client_address_of(other) == other_config.advertised_address
        assert config.advertised_address.rpartition(":")[2] == config.listen.rpartition(":")[2]
    assert len({c.advertised_address for c in configs.values()}) == 3


def test_the_systemd_unit_starts_each_hosts_node() -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.read(DEPLOY / "systemd" / "tidelog.service")
    command = shlex.split(unit["Service"]["ExecStart"])
    assert Path(command[0]).name == "tidelog"
    configs = {
        n: config_of(command[1:], {CONFIG_PATH: DEPLOY / "systemd" / f"node-{n}.properties"})
        for n in (1, 2, 3)
    }
    check_cluster(configs)
    data_dirs = {c.data_dir for c in configs.values()}
    assert data_dirs == {Path("/var/lib/") / unit["Service"]["StateDirectory"]}
    assert str(data_dirs.pop()) in unit["Service"]["ReadWritePaths"].split()
    assert unit["Service"]["KillSignal"] == "SIGTERM"  # the graceful stop
    for config in configs.values():
        assert len(config.plaintext_exposures()) == 2, "TLS is commented out: warned about"


def test_the_compose_file_and_the_image_make_a_three_node_cluster() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    directives = dict(
        line.split(" ", 1) for line in dockerfile.splitlines() if re.match(r"[A-Z]+ ", line)
    )
    entrypoint, volume = json.loads(directives["ENTRYPOINT"]), json.loads(directives["VOLUME"])
    assert entrypoint[0] == "tidelog" and directives["USER"] == "tidelog", "not root"
    assert re.search(r"^RUN pip wheel .* \.$", dockerfile, re.M), "installs the repository"
    configs: dict[int, NodeConfig] = {}
    for name, service in compose["services"].items():
        build = service["build"]
        assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == (
            DEPLOY / "Dockerfile").resolve()
        mounts: dict[str, Path] = {}
        data_volumes = []
        for spec in service["volumes"]:
            source, target, *_ = spec.split(":")
            if source.startswith("."):
                mounts[target] = DEPLOY / source
            else:
                assert source in compose["volumes"], f"{name}: volume {source} is declared"
                data_volumes.append(target)
        config = config_of([*entrypoint[1:], *service["command"]], mounts)
        configs[config.node_id] = config
        assert [str(config.data_dir)] == data_volumes == volume, f"{name} keeps its data"
        host, _, port = config.advertised_address.rpartition(":")
        assert host == service["hostname"] == name, "the others dial it by its service name"
        assert service["ports"] == [f"{port}:{port}"], "the client port is published as is"
        assert config.listen == f"0.0.0.0:{port}"
    check_cluster(configs)
