"""The perf tools' figures as Kafka's tools compute and print them (no cluster)."""

from __future__ import annotations

import pytest

from tidelog.commands.perf import Stats, producer_settings
from tidelog.errors import ConfigurationError


def test_window_and_total_lines_are_kafkas_formats() -> None:
    stats = Stats(started=100.0, window_start=100.0)
    for n in range(1, 1001):
        stats.record(float(n), 1024)
    assert stats.window_line(102.0) == (
        "1000 records sent, 500.0 records/sec (0.49 MB/sec), 500.5 ms avg latency, "
        "1000.0 ms max latency."
    )
    assert stats.window_line(103.0) is None  # nothing acknowledged in that window
    assert stats.total_line(104.0) == (
        "1000 records sent, 250.000000 records/sec (0.24 MB/sec), 500.50 ms avg latency, "
        "1000.00 ms max latency, 501 ms 50th, 951 ms 95th, 991 ms 99th, 1000 ms 99.9th."
    )


def test_producer_props_by_kafkas_names() -> None:
    assert producer_settings({"acks": "1", "linger.ms": "20", "compression.type": "zstd",
                              "enable.idempotence": "false", "batch.size": "65536"}) == {
        "acks": "1", "linger_ms": 20, "compression_type": "zstd", "idempotent": False,
        "batch_size": 65536,
    }
    with pytest.raises(ConfigurationError, match=r"linger\.ms"):
        producer_settings({"linger.ms": "soon"})
    with pytest.raises(ConfigurationError, match=r"unknown producer property 'no\.such'"):
        producer_settings({"no.such": "1"})
