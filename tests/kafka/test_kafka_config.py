"""kafka.listen and kafka.advertised.address: checked as listen and advertised.address are,
bound to the real port, and named among the plaintext listeners other hosts reach."""

from __future__ import annotations

import pytest

from tidelog.errors import InvalidConfigError
from tidelog.node.config import NodeConfig

BASE = {"node.id": "1", "listen": "127.0.0.1:7420", "data.dir": "/tmp/tidelog-unused"}


def test_no_kafka_listener_by_default_and_one_bound_to_its_real_port() -> None:
    assert NodeConfig.from_properties(BASE).kafka_advertised_address == ""
    config = NodeConfig.from_properties({**BASE, "kafka.listen": "127.0.0.1:0"})
    bound = config.kafka_bound(9092)
    assert (bound.kafka_listen, bound.kafka_advertised_address) == (
        "127.0.0.1:9092", "127.0.0.1:9092")
    assert NodeConfig.from_properties(bound.to_properties()) == bound
    wildcard = NodeConfig.from_properties({
        **BASE, "kafka.listen": "0.0.0.0:9092", "kafka.advertised.address": "h1.example:9092",
    })
    assert wildcard.kafka_bound(9092).kafka_advertised_address == "h1.example:9092"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"kafka.listen": "0.0.0.0:9092"},
         "kafka.listen 0.0.0.0:9092 is a wildcard address: set kafka.advertised.address"),
        ({"kafka.listen": "[::]:9092", "kafka.advertised.address": "0.0.0.0:1"},
         "kafka.advertised.address 0.0.0.0:1 is a wildcard"),
        ({"kafka.listen": "127.0.0.1:0", "kafka.advertised.address": "h:0"},
         "kafka.advertised.address h:0 is a wildcard or has port 0"),
        ({"kafka.listen": "127.0.0.1"}, "kafka.listen: expected HOST:PORT"),
        ({"kafka.advertised.address": "h:9092"}, "kafka.listen is not"),
        ({"kafka.listen": "127.0.0.1:7420"}, "the Kafka listener needs its own port"),
        ({"kafka.listen": "127.0.0.1:7520", "internal.listen": "127.0.0.1:7520"},
         "the Kafka listener needs its own port"),
        ({"kafka.listn": "127.0.0.1:9092"}, "did you mean 'kafka.listen'"),
        ({"connections.max.idle.ms": "0"}, "connections.max.idle.ms must be >= 1, or -1"),
        ({"connections.max.idle.ms": "-2"}, "connections.max.idle.ms must be >= 1, or -1"),
        ({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable must be true or false"),
        ({"kafka.security.protocol": "SASL_PLAINTEXT"}, "kafka.listen is not"),
        ({"kafka.listen": "127.0.0.1:0", "kafka.security.protocol": "SASL_SSL"},
         "an SSL listener needs ssl.certfile and ssl.keyfile"),
        ({"kafka.listen": "127.0.0.1:0", "kafka.security.protocol": "GSSAPI"},
         "kafka.security.protocol must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
        ({"kafka.listen": "127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,GSSAPI"},
         "sasl.enabled.mechanisms must name some of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, "
         "not GSSAPI"),
    ],
)
def test_kafka_listener_refusals_name_the_setting(
    override: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidConfigError) as info:
        NodeConfig.from_properties({**BASE, **override})
    assert message in str(info.value)


def test_a_plaintext_kafka_listener_beyond_loopback_is_named() -> None:
    config = NodeConfig.from_properties({**BASE, "kafka.listen": "10.0.0.1:9092"})
    assert [e for e in config.plaintext_exposures() if e.startswith("kafka.listen")] == [
        "kafka.listen 10.0.0.1:9092 is not a loopback address and has no TLS "
        "(security.protocol=PLAINTEXT): anyone who reaches it can read and write every topic"
    ]
    tls = {"ssl.certfile": "c", "ssl.keyfile": "k", "security.protocol": "SSL"}
    secured = NodeConfig.from_properties({**BASE, **tls, "kafka.listen": "10.0.0.1:9092"})
    assert secured.plaintext_exposures() == []
    sasl = NodeConfig.from_properties({**BASE, "kafka.listen": "10.0.0.1:9092",
                                       "kafka.security.protocol": "sasl_plaintext"})
    assert [e for e in sasl.plaintext_exposures() if e.startswith("kafka.listen")] == [
        "kafka.listen 10.0.0.1:9092 is not a loopback address and has no TLS "
        "(kafka.security.protocol=SASL_PLAINTEXT): anyone who reaches it can read every record "
        "sent over it, and with SASL/PLAIN the passwords"
    ]
    sasl_ssl = NodeConfig.from_properties({**BASE, **tls, "kafka.listen": "10.0.0.1:9092",
                                           "kafka.security.protocol": "SASL_SSL"})
    assert sasl_ssl.plaintext_exposures() == []
    assert sasl_ssl.sasl_enabled_mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")
