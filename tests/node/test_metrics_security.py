"""What the metrics endpoint shows, and to whom (issue 26): it binds loopback unless told
otherwise; bound anywhere else it needs a scrape token and TLS, and a node refuses to start
without them; with a token it answers 401 to a scrape without it; and topic labels can be
turned off, so that the endpoint names no topic."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tidelog.errors import InvalidConfigError
from tidelog.node.config import NodeConfig
from tidelog.node.metrics import NodeMetrics
from tidelog.testing import LocalCluster, Raw, make_batch

pytestmark = pytest.mark.timeout(180)

BASE = {"node.id": "1", "listen": "127.0.0.1:0", "data.dir": "/tmp/unused", "metrics.port": "0"}
TOKEN = "s3cret-scrape-token"


def test_the_endpoint_binds_loopback_whatever_the_listen_address() -> None:
    config = NodeConfig.from_properties(
        {**BASE, "listen": "0.0.0.0:9092", "advertised.address": "10.1.2.3:9092",
         "internal.listen": "10.1.2.3:9093"}
    )
    assert config.metrics_host == "127.0.0.1"


@pytest.mark.parametrize(("extra", "message"), [
    ({"metrics.host": "0.0.0.0"}, "metrics.host 0.0.0.0 is not a loopback address"),
    ({"metrics.host": "10.1.2.3"}, "needs a scrape credential"),
    ({"metrics.host": "10.1.2.3", "metrics.auth.token.file": "/tmp/token"},
     "needs ssl.certfile and ssl.keyfile"),
])
def test_an_exposed_endpoint_without_tls_and_token_is_a_config_error(
    extra: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        NodeConfig.from_properties({**BASE, **extra})


def _get(url: str, token: str | None, context: ssl.SSLContext | None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, b""


def test_an_unreadable_token_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match=r"metrics\.auth\.token\.file .*cannot read"):
        NodeMetrics().serve("127.0.0.1", 0, token_file=str(tmp_path / "missing"))


def test_a_node_with_topic_labels_off_names_no_topic_and_wants_its_token(
    tmp_path: Path,
) -> None:
    """A real node: TLS on, metrics.auth.token.file and metrics.topic.labels=false. The scrape
    needs the token, and the page counts the partitions without naming the topic."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    with LocalCluster(
        nodes=1, tls=True, metrics_topic_labels=False, metrics_auth_token_file=str(token_file),
    ) as cluster, Raw(cluster) as raw:
        raw.create_topic("secret-topic-name", 2, 1)
        leader = raw.wait_leaders("secret-topic-name", 2)[0]
        answer = raw.produce(leader, "secret-topic-name", 0, make_batch([b"v"]))
        assert answer.error_code == 0, answer
        address = cluster.metrics_address(1)
        assert address is not None and address.startswith("127.0.0.1:")
        trusted = ssl.create_default_context(cafile=str(cluster.tls_dir / "ca.pem"))
        url = f"https://{address}/metrics"
        assert _get(url, None, trusted)[0] == 401
        assert _get(url, "wrong", trusted)[0] == 401
        with pytest.raises(OSError):  # plain HTTP is not served
            _get(f"http://{address}/metrics", TOKEN, None)
        status, page = _get(url, TOKEN, trusted)
    assert status == 200
    assert b"secret-topic-name" not in page
    assert b"tidelog_partition_high_watermark" not in page
    assert b"tidelog_partitions " in page  # the per-node count is still there
