"""Compressed batches: Kafka's codec ids and framings, the leader's checks of every record inside
one (without recompressing under compression.type=producer, recompressing under a codec), a
bounded decompression that refuses bombs, garbage that never gets past CORRUPT_MESSAGE, and the
cleaner, the timestamp lookups and the consumer's decoding over compressed batches."""

from __future__ import annotations

import contextlib
import random
import struct
import tracemalloc
from pathlib import Path

import cramjam
import pytest
from record_helpers import T, forge_batch, forge_record
from storage_helpers import T0, FakeClock, assert_lookups_match_brute_force, open_log

from tidelog import Client, TopicPartition
from tidelog.compression import Codec, compress, decompress
from tidelog.errors import (
    ConfigurationError,
    CorruptMessageError,
    InvalidConfigError,
    UnsupportedCompressionTypeError,
)
from tidelog.metadata import MetadataSnapshot, PartitionInfo, TopicInfo
from tidelog.producer.accumulator import Batch, CompressionRatioEstimator, RecordAccumulator
from tidelog.producer.config import ProducerConfig
from tidelog.producer.idempotence import IdempotenceState
from tidelog.producer.sender import Sender
from tidelog.records import (
    ATTR_COMPRESSION,
    HEADER_SIZE,
    MAX_BATCH_BYTES,
    RECORD_OVERHEAD,
    Record,
    RecordInput,
    build_batch,
    decode_records,
    iter_batches,
    read_header,
    record_keys,
    retain_records,
    validate_batch,
    with_codec,
)
from tidelog.storage import Log, LogConfig
from tidelog.storage.cleaner import LogCleaner

CODECS = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
UNBOUNDED = 2**62


def _validate(buf: bytes, *, from_client: bool = True):  # type: ignore[no-untyped-def]
    return validate_batch(buf, now_ms=T, timestamp_before_max_ms=UNBOUNDED,
                          timestamp_after_max_ms=UNBOUNDED, from_client=from_client)


def json_records(n: int, ts: int = T) -> list[RecordInput]:
    """Compressible records (JSON-like text, as the benchmark sends), with a key, a null value
    and headers among them."""
    out = [RecordInput(b'{"id": %d, "user": "user-%d", "tags": ["a", "b"]}' % (i, i % 7),
                       None if i % 3 else b"key-%d" % i, ts + i % 5) for i in range(n)]
    out[1] = RecordInput(None, b"tombstone", ts)
    out[2] = RecordInput(b"v", None, ts, [("h", b"x"), ("n", None)])
    return out


def decoded(log: Log) -> list[Record]:
    data = log.read(log.log_start_offset, 1 << 30)
    return [r for pos, h in iter_batches(data) for r in decode_records(data, pos, h)]


def with_records(codec: Codec, records: bytes, **kw: int) -> bytes:
    """A batch whose records section is `records` compressed with `codec` (CRC correct), for
    records that lie."""
    return forge_batch(compress(codec, records), attributes=codec, **kw)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_every_codec_round_trips_through_the_leaders_checks(codec: Codec) -> None:
    records = json_records(300)
    plain = build_batch(records)
    data = build_batch(records, compression=codec)
    header = _validate(data)
    assert header.attributes & ATTR_COMPRESSION == codec
    assert len(data) < len(plain) / 3  # the JSON-like text compresses
    assert decode_records(data, 0, header) == decode_records(plain, 0, read_header(plain))


def test_framings_are_kafkas() -> None:
    """gzip and zstd frames; snappy in xerial's stream framing (Kafka's Java client); LZ4 frames
    with independent blocks (Kafka's reader decompresses each block on its own)."""
    body = bytes(range(256)) * 600  # over one 32 KiB snappy block and one 64 KiB LZ4 block
    assert compress(Codec.GZIP, body)[:2] == b"\x1f\x8b"
    assert compress(Codec.ZSTD, body)[:4] == b"\x28\xb5\x2f\xfd"
    snappy = compress(Codec.SNAPPY, body)
    assert snappy[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    (first_block,) = struct.unpack_from(">i", snappy, 16)
    assert len(bytes(cramjam.snappy.decompress_raw(snappy[20 : 20 + first_block]))) == 32 * 1024
    lz4 = compress(Codec.LZ4, body)
    assert lz4[:4] == b"\x04\x22\x4d\x18" and lz4[4] & 0x20  # FLG: block independence
    assert lz4[5] >> 4 & 7 == 4  # BD: 64 KiB blocks
    for codec in CODECS:
        assert decompress(codec, compress(codec, body), len(body)) == body


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_output_far_larger_than_the_first_buffer_decompresses(codec: Codec) -> None:
    """Zeros compress beyond any first guess of the output's size: the buffer grows."""
    body = bytes(8 << 20)
    assert decompress(codec, compress(codec, body), MAX_BATCH_BYTES) == body


def test_raw_snappy_without_xerial_framing_is_read() -> None:
    """xerial's reader (Kafka's) takes a stream without its header as one raw block."""
    records = build_batch(json_records(20))[HEADER_SIZE:]
    raw = bytes(cramjam.snappy.compress_raw(records))
    data = forge_batch(raw, attributes=Codec.SNAPPY, count=20, last_offset_delta=19,
                       max_timestamp=T + 4)
    assert len(decode_records(data, 0, _validate(data))) == 20


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_codec_ids_kafka_leaves_undefined_are_unsupported(codec: int) -> None:
    data = forge_batch(forge_record(), attributes=codec)
    with pytest.raises(UnsupportedCompressionTypeError, match=f"codec {codec}") as err:
        _validate(data)
    assert err.value.code == 76
    with pytest.raises(UnsupportedCompressionTypeError):
        decode_records(data, 0, read_header(data))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_lying_lengths_inside_compressed_records_are_corrupt(codec: int) -> None:
    """The same framing checks as for uncompressed records, on the decompressed bytes."""
    lying = forge_record(key=b"k", key_len=1 << 20)
    with pytest.raises(CorruptMessageError, match=r"malformed record 0.*key length"):
        _validate(with_records(Codec(codec), lying))
    trailing = forge_record() + b"\x00\x00"
    with pytest.raises(CorruptMessageError, match="bytes follow the last"):
        _validate(with_records(Codec(codec), trailing))


def zstd_bomb(size: int, claimed_size: int) -> bytes:
    """A zstd frame of `size` zero bytes made of RLE blocks (4 bytes per 128 KiB), whose
    header claims `claimed_size` (RFC 8878: a 4-byte Frame_Content_Size, then a block header of
    Last_Block, Block_Type 1 = RLE and Block_Size, then the byte to repeat)."""
    block = 128 * 1024
    out = [struct.pack("<IB", 0xFD2FB528, 0b1010_0000), struct.pack("<I", claimed_size)]
    for start in range(0, size, block):
        n = min(block, size - start)
        last = int(start + n >= size)
        out.append((n << 3 | 1 << 1 | last).to_bytes(3, "little") + b"\x00")
    return b"".join(out)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_a_decompression_bomb_is_refused_within_its_limit(codec: Codec) -> None:
    """Records that decompress to more than the limit are CORRUPT_MESSAGE, found without
    holding much more than the limit in memory, whatever the stream says of its size."""
    bomb = zstd_bomb(64 << 20, 100) if codec is Codec.ZSTD else compress(codec, bytes(16 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(CorruptMessageError, match=f"more than {1 << 20} bytes"):
            decompress(codec, bomb, 1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(bomb) + (3 << 20)


def test_a_batch_bomb_gets_corrupt_message_from_the_leader() -> None:
    """The batch-level limit is MAX_BATCH_BYTES of records: a zstd bomb just past it (a few
    KiB on the wire) is refused."""
    assert decompress(Codec.ZSTD, zstd_bomb(1000, 1000), 1000) == bytes(1000)
    data = forge_batch(zstd_bomb(MAX_BATCH_BYTES, 0), attributes=Codec.ZSTD)
    assert len(data) < 4000
    with pytest.raises(CorruptMessageError, match="decompress to more than") as err:
        _validate(data)
    assert err.value.code == 2


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_garbage_compressed_records_are_only_ever_corrupt(codec: Codec) -> None:
    """Fuzz: flipped bytes, truncations and random bytes as the records section of a batch
    with a correct CRC: the leader and the consumer's decoder answer CORRUPT_MESSAGE or read
    valid records, never anything else."""
    rng = random.Random(int(codec))
    good = compress(codec, build_batch(json_records(40))[HEADER_SIZE:])
    for trial in range(150):
        if trial % 3 == 0:
            section = rng.randbytes(rng.randrange(64))
        else:
            damaged = bytearray(good)
            for _ in range(rng.randint(1, 4)):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            section = bytes(damaged[: rng.randrange(1, len(damaged) + 1)] if trial % 3 == 1
                            else damaged)
        data = forge_batch(section, attributes=codec, count=40, last_offset_delta=39,
                           max_timestamp=T + 4)
        for check in (_validate, lambda d: decode_records(d, 0, read_header(d))):
            with contextlib.suppress(CorruptMessageError):
                check(data)


def test_the_cleaner_keeps_a_compressed_batchs_codec(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path, clock, cleanup_policy=frozenset({"compact"}), segment_bytes=200)
    for n, value in enumerate((b"1", b"2", b"3")):
        log.append_as_leader(build_batch(
            [RecordInput(value, key, T0 + n) for key in (b"a", b"b", b"c")],
            compression=Codec.LZ4,
        ), 0)
    log.append_as_leader(build_batch([RecordInput(b"4", b"a", T0 + 5)], compression=Codec.LZ4), 0)
    log.update_high_watermark(log.log_end_offset)
    LogCleaner(log).clean(clock.now, None)
    kept = [(r.offset, r.key, r.value) for r in decoded(log)]
    assert kept == [(7, b"b", b"3"), (8, b"c", b"3"), (9, b"a", b"4")]
    data = log.read(log.log_start_offset, 1 << 20)
    assert {h.attributes & ATTR_COMPRESSION for _, h in iter_batches(data)
            if h.records_count} == {Codec.LZ4}
    assert_lookups_match_brute_force(log)


def test_retained_nothing_is_an_uncompressed_empty_batch() -> None:
    data = build_batch([RecordInput(b"v", b"k", T)], compression=Codec.GZIP)
    empty = retain_records(data, 0, read_header(data), set())
    header = read_header(empty)
    assert (header.records_count, header.attributes & ATTR_COMPRESSION) == (0, 0)
    assert record_keys(empty, 0, header) == ([], [], set())


def test_topic_compression_type_producer_keeps_the_producers_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, FakeClock())
    data = build_batch(json_records(50), compression=Codec.SNAPPY)
    assert log.validate_produced_batch(data, from_client=True)[0] is data


@pytest.mark.parametrize(("topic", "codec"), [("zstd", Codec.ZSTD), ("uncompressed", Codec.NONE),
                                               ("gzip", Codec.GZIP)])
def test_a_topic_codec_makes_the_leader_recompress(
    tmp_path: Path, topic: str, codec: Codec
) -> None:
    log = open_log(tmp_path, FakeClock(), compression_type=topic)
    records = json_records(50)
    produced = build_batch(records, compression=Codec.LZ4, producer_id=3, producer_epoch=1,
                           base_sequence=9)
    converted, header = log.validate_produced_batch(produced, from_client=True)
    assert header.attributes & ATTR_COMPRESSION == codec
    assert (header.producer_id, header.base_sequence) == (3, 9)
    _validate(converted)  # the CRC is the new bytes'
    log.append_stamped(log.stamp(converted, 0, 0))
    plain = build_batch(records)
    assert decoded(log) == decode_records(plain, 0, read_header(plain))


def test_compression_type_configs() -> None:
    assert LogConfig.from_kafka_props({"compression.type": "zstd"}).codec is Codec.ZSTD
    assert LogConfig().codec is None  # producer
    with pytest.raises(InvalidConfigError, match=r"compression\.type"):
        LogConfig.from_kafka_props({"compression.type": "brotli"})
    assert ProducerConfig(compression_type="lz4").codec is Codec.LZ4
    with pytest.raises(ConfigurationError, match="compression_type"):
        ProducerConfig(compression_type="uncompressed")


def test_with_codec_keeps_a_batch_of_that_codec() -> None:
    data = build_batch(json_records(5), compression=Codec.ZSTD)
    assert with_codec(data, Codec.ZSTD) is data
    back = with_codec(with_codec(data, Codec.NONE), Codec.ZSTD)
    assert decode_records(back, 0, _validate(back)) == decode_records(data, 0, read_header(data))


def test_dump_log_deep_shows_the_records_of_compressed_batches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tidelog.cli import main

    log = open_log(tmp_path / "t-0", FakeClock())
    log.append_as_leader(build_batch(json_records(4, T0), compression=Codec.ZSTD), 0)
    log.close()
    code = main(["dump-log", "--deep", str(tmp_path / "t-0" / f"{0:020d}.log")])
    out = capsys.readouterr().out
    assert code == 0
    assert "count: 4" in out and "compresscodec: zstd" in out
    assert out.count("| offset: ") == 4 and "key: 'key-3' value: '{\"id\": 3" in out


def test_the_ratio_estimate_moves_as_kafkas_does() -> None:
    """Kafka's CompressionRatioEstimator: 1.0 at first, 0.005 better per batch that
    compresses better, at once (by at least 0.05) to a batch that compresses worse."""
    estimator = CompressionRatioEstimator()
    assert estimator.estimate("t") == 1.0
    assert estimator.observe("t", 0.3) == pytest.approx(0.995)
    assert estimator.observe("t", 1.2) == pytest.approx(1.2)
    assert estimator.observe("t", 1.21) == pytest.approx(1.25)
    for _ in range(300):
        estimator.observe("t", 0.3)
    assert estimator.estimate("t") == pytest.approx(0.3) and estimator.estimate("u") == 1.0


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_compressing_producer_fills_batches_to_batch_size_of_compressed_bytes(
    codec: str,
) -> None:
    """As Kafka's producer: batch_size counts compressed bytes, at the topic's estimated ratio,
    which the sender moves with every batch it compresses. Once it has settled, a zstd batch of
    compressible records carries several times the records of an uncompressed one and still
    comes out within batch_size; without a codec a batch holds batch_size of records."""
    rng = random.Random(3)
    words = [b"order", b"shipped", b"customer", b"refund", b"address", b"price", b"coupon"]
    values = [b'{"id": %d, "type": "%s", "note": "%s", "token": "%s"}' % (
        n, rng.choice(words), b" ".join(rng.choices(words, k=60)), rng.randbytes(8).hex().encode()
    ) for n in range(500)]
    tp = TopicPartition("t", 0)
    config = ProducerConfig(compression_type=codec, batch_size=16_384, idempotent=False)
    with Client("127.0.0.1:9") as client:  # never connected: the metadata is set here
        client.metadata.update(MetadataSnapshot(
            nodes={1: "h:1"}, controller_id=1,
            topics={"t": TopicInfo("t", (PartitionInfo(1, 1, (1,)),))},
        ))
        idempotence = IdempotenceState(False)
        accumulator = RecordAccumulator(client.connections, config, idempotence)
        accumulator._wake_sender = lambda: None
        sender = Sender(client.connections, accumulator, idempotence)
        left: list[Batch] = []
        for n in range(1_000 if codec == "none" else 12_000):
            accumulator.send("t", values[n % len(values)], partition=0)
            queue = accumulator.queue_of(Batch(tp, 0, 0, 0, accumulator._lock)).queue
            while len(queue) > 1:  # what the sender does with a batch that leaves
                left.append(queue.popleft())
                sender._frame(left[-1])
        full = left[-10:]  # filled at the settled estimate
    plain = sum(map(len, values[:100])) / 100 + RECORD_OVERHEAD
    uncompressed_count = (16_384 - HEADER_SIZE) // plain
    sizes = [HEADER_SIZE + len(b.body) for b in full]
    counts = [b.count for b in full]
    if codec == "none":
        assert max(sizes) <= 16_384 and min(counts) >= uncompressed_count - 1
    else:
        assert accumulator.estimator is not None
        assert accumulator.estimator.estimate("t") < 0.4
        assert max(sizes) <= 16_384 and min(sizes) > 0.6 * 16_384, sizes
        assert min(counts) > 2.5 * uncompressed_count, (counts, uncompressed_count)
