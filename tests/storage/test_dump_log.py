"""``tidelog dump-log`` on segments written by storage.Log: what it prints, what it finds wrong,
and that damage ends in a message and an exit code, never a traceback."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from storage_helpers import T0, FakeClock, batch, marker, open_log

from tidelog.cli import main
from tidelog.records import RecordInput, build_batch, iter_batches
from tidelog.storage import AbortedTxn, OffsetIndex, TimeIndex, TransactionIndex

REPO = Path(__file__).resolve().parents[2]
CONFIG = {"segment_bytes": 1500, "index_interval_bytes": 150}


def seg(directory: Path, base: int, suffix: str) -> Path:
    return directory / f"{base:020d}{suffix}"


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """Two full segments and an active one; the last batches have keys, headers and a marker."""
    directory = tmp_path / "topic-0"
    log = open_log(directory, FakeClock(), **CONFIG)
    for i in range(20):
        log.append_as_leader(batch([T0 + 10 * i, T0 + 10 * i + 5], value_size=40), 1)
    log.append_as_leader(
        build_batch([
            RecordInput(value=b"hello world", key=b"k1", timestamp=T0 + 500,
                        headers=[("trace", b"abc"), ("empty", None)]),
            RecordInput(value=bytes(range(200)), timestamp=T0 + 501),
        ]),
        2,
    )
    log.append_as_leader(marker(), 3)
    log.close()
    return directory


def dump(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["dump-log", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def batch_fields(out: str) -> list[dict[str, str]]:
    return [dict(re.findall(r"(\w+): (\S+)", line)) for line in out.splitlines()
            if line.startswith("baseOffset:")]


def bases(directory: Path) -> list[int]:
    return sorted(int(p.stem) for p in directory.glob("*.log"))


def test_log_dump_shows_every_batch_of_the_segment(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for base in bases(log_dir):
        path = seg(log_dir, base, ".log")
        code, out, err = dump(capsys, path)
        assert (code, err) == (0, "")
        data = path.read_bytes()
        expected = [(pos, h) for pos, h in iter_batches(data)]
        shown = batch_fields(out)
        assert len(shown) == len(expected) > 0
        for fields, (pos, h) in zip(shown, expected, strict=True):
            assert fields["baseOffset"] == str(h.base_offset)
            assert fields["lastOffset"] == str(h.last_offset)
            assert fields["count"] == str(h.records_count)
            assert fields["position"] == str(pos)
            assert fields["size"] == str(h.size)
            assert fields["partitionLeaderEpoch"] == str(h.partition_leader_epoch)
            assert fields["maxTimestamp"] == str(h.max_timestamp)
            assert fields["isValid"] == "true"
            assert fields["isControl"] == str(h.is_control).lower()
            assert fields["timestampType"] == "CreateTime"
        assert "| offset:" not in out


def test_deep_dump_shows_records_headers_and_control_type(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    last = seg(log_dir, bases(log_dir)[-1], ".log")
    code, out, _ = dump(capsys, last, "--deep")
    assert code == 0
    records = [line for line in out.splitlines() if line.startswith("| offset:")]
    text, binary, control = records[-3:]  # the segment may hold earlier batches too
    assert f"CreateTime: {T0 + 500}" in text
    assert "keySize: 2 valueSize: 11" in text
    assert "key: 'k1' value: 'hello world'" in text
    assert "headers: [trace='abc', empty=null]" in text
    assert "keySize: -1 valueSize: 200" in binary
    assert "key: null value: 0x000102030405" in binary and binary.endswith("...")
    assert "controlType: LEADER_CHANGE" in control


def test_index_files_show_their_entries_with_absolute_offsets(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = bases(log_dir)[1]
    assert base > 0
    index, time_index = seg(log_dir, base, ".index"), seg(log_dir, base, ".timeindex")
    code, out, err = dump(capsys, index)
    assert (code, err) == (0, "")
    entries = [tuple(map(int, m)) for m in re.findall(r"offset: (\d+) position: (\d+)", out)]
    assert entries == [tuple(e) for e in OffsetIndex.read_entries(index)]
    assert entries and min(o for o, _ in entries) > base

    code, out, err = dump(capsys, time_index)
    assert (code, err) == (0, "")
    entries = [tuple(map(int, m)) for m in re.findall(r"timestamp: (\d+) offset: (\d+)", out)]
    assert entries == [tuple(e) for e in TimeIndex.read_entries(time_index)]
    assert entries and min(o for _, o in entries) >= base


def test_sanity_check_passes_on_a_healthy_log(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for base in bases(log_dir):
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            code, _, err = dump(capsys, seg(log_dir, base, suffix), "--index-sanity-check")
            assert (code, err) == (0, ""), suffix


def test_dumping_changes_nothing_on_disk(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = {p.name: p.read_bytes() for p in log_dir.iterdir()}
    (log_dir / f"{0:020d}.index").unlink()  # a reader must not recreate it
    del before[f"{0:020d}.index"]
    for path in sorted(log_dir.glob("*.*")):
        dump(capsys, path, "--deep") if path.suffix == ".log" else dump(capsys, path)
        if path.suffix == ".log":
            dump(capsys, path, "--index-sanity-check")
    assert {p.name: p.read_bytes() for p in log_dir.iterdir()} == before


def overwrite(path: Path, position: int, data: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[position : position + len(data)] = data
    path.write_bytes(bytes(raw))


def test_sanity_check_names_an_offset_index_entry_that_misses_its_batch(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = seg(log_dir, 0, ".index")
    entries = OffsetIndex.read_entries(index)
    assert len(entries) >= 3
    # entry 1 keeps its offset but points 7 bytes into its batch; entry 2 names an offset
    # outside the batch it points at
    overwrite(index, 8, OffsetIndex.ENTRY.pack(entries[1].offset, entries[1].position + 7))
    overwrite(index, 16, OffsetIndex.ENTRY.pack(entries[0].offset + 1, entries[2].position))
    code, out, err = dump(capsys, index)
    assert code == 1
    assert "offset:" in out
    problems = err.splitlines()
    assert any(f"entry 1 (offset {entries[1].offset}, position {entries[1].position + 7}): "
               "no batch starts at that position" in p for p in problems)
    assert any(f"entry 2 (offset {entries[0].offset + 1}, position {entries[2].position}): "
               "the batch there holds offsets" in p for p in problems)
    assert not any("entry 0 " in p or "entry 3 " in p for p in problems)

    code, _, err = dump(capsys, seg(log_dir, 0, ".log"), "--index-sanity-check")
    assert code == 1 and "entry 1 (offset" in err


def test_sanity_check_names_bad_time_index_entries(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    time_index = seg(log_dir, 0, ".timeindex")
    entries = TimeIndex.read_entries(time_index)
    assert len(entries) >= 3
    overwrite(time_index, 12, TimeIndex.ENTRY.pack(entries[2].timestamp + 1, entries[1].offset))
    overwrite(time_index, 24, TimeIndex.ENTRY.pack(entries[2].timestamp, 10**6))
    code, _, err = dump(capsys, time_index)
    assert code == 1
    assert f"entry 1 (timestamp {entries[2].timestamp + 1}, offset {entries[1].offset}): " \
        f"the batch ending there has max timestamp {entries[1].timestamp}" in err
    assert f"entry 2 (timestamp {entries[2].timestamp}, offset {10**6}): not monotonic" in err
    assert f"entry 2 (timestamp {entries[2].timestamp}, offset {10**6}): outside the " \
        "segment's offsets" in err


def test_a_partial_index_entry_is_reported(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = seg(log_dir, 0, ".index")
    size = index.stat().st_size
    with index.open("ab") as f:
        f.write(b"\x00\x01\x02")
    code, _, err = dump(capsys, index)
    assert code == 1
    assert f"length {size + 3} is not a multiple of 8" in err


def test_transaction_index_entries_are_shown_and_checked(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = bases(log_dir)[-1]
    path = seg(log_dir, base, ".txnindex")
    path.unlink()
    txn_index = TransactionIndex.create(path)
    txn_index.append(AbortedTxn(producer_id=7, first_offset=base - 3, last_offset=base,
                                last_stable_offset=base + 1))
    txn_index.append(AbortedTxn(producer_id=8, first_offset=base, last_offset=base + 10**6,
                                last_stable_offset=base + 10**6 + 1))
    txn_index.file.close()
    code, out, err = dump(capsys, path)
    assert code == 1
    assert (f"producerId: 7 firstOffset: {base - 3} lastOffset: {base} "
            f"lastStableOffset: {base + 1}") in out
    assert "producerId: 8" in out
    assert len(err.strip().splitlines()) == 1
    assert f"entry 1 (producer 8, last offset {base + 10**6}): the marker offset is outside" in err


def test_a_producer_snapshot_is_shown_and_a_damaged_one_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = open_log(tmp_path, FakeClock())
    log.append_as_leader(build_batch([RecordInput(b"t", None, T0)], producer_id=7,
                                     producer_epoch=2, base_sequence=0, transactional=True), 1)
    log.close()  # a snapshot at the log end
    [path] = tmp_path.glob("*.snapshot")
    code, out, err = dump(capsys, path)
    assert code == 0, err
    assert ("producerId: 7 producerEpoch: 2 coordinatorEpoch: -1 currentTxnFirstOffset: 0 "
            "lastSequence: 0 lastOffset: 0") in out
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    code, out, err = dump(capsys, path)
    assert code == 1 and "not a valid producer snapshot: checksum mismatch" in err
    assert "Traceback" not in err


def test_a_crc_mismatch_is_shown_and_fails(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = seg(log_dir, 0, ".log")
    positions = [pos for pos, _ in iter_batches(path.read_bytes())]
    overwrite(path, positions[2] + 100, b"\xff")
    code, out, err = dump(capsys, path)
    assert code == 1
    assert [f["isValid"] for f in batch_fields(out)].count("false") == 1
    assert batch_fields(out)[2]["isValid"] == "false"
    assert f"CRC mismatch in batch at position {positions[2]}" in err


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "dump-log", *map(str, args)],
        capture_output=True, text=True, cwd=REPO, check=False,
    )


def test_a_truncated_log_gives_one_line_naming_file_and_position(log_dir: Path) -> None:
    path = seg(log_dir, 0, ".log")
    positions = [pos for pos, _ in iter_batches(path.read_bytes())]
    cut = positions[-1] + 30
    path.write_bytes(path.read_bytes()[:cut])
    result = run_cli(path, "--deep")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert str(path) in lines[0] and f"position {positions[-1]}" in lines[0]
    assert len(batch_fields(result.stdout)) == len(positions) - 1

    path.write_bytes(b"\x00" * 5)
    result = run_cli(path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert str(path) in result.stderr and "position 0" in result.stderr


def test_usage_errors_exit_2(log_dir: Path, tmp_path: Path) -> None:
    for args in (
        [log_dir / f"{999:020d}.log"],
        [log_dir / "log-offsets-checkpoint"],
        [log_dir / "leader-epoch-checkpoint"],
    ):
        result = run_cli(*args)
        assert result.returncode == 2, args
        assert "Traceback" not in result.stderr and str(args[0]) in result.stderr
    lonely = tmp_path / f"{0:020d}.index"
    lonely.write_bytes(struct.pack(">II", 1, 0))
    assert run_cli(lonely).returncode == 0
    result = run_cli(lonely, "--index-sanity-check")
    assert result.returncode == 2 and ".log beside it" in result.stderr
