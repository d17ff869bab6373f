"""Protocol-level helpers for tests against real node processes.

The cluster tests speak raw gRPC on purpose: they check error codes, hints and bounds exactly
as a node returns them, which the client library would retry away.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import grpc

from tidelog.errors import NotControllerError, for_code
from tidelog.records import RecordInput, build_batch, decode_records, iter_batches
from tidelog.testing import LocalCluster
from tidelog.v1 import tidelog_pb2 as pb
from tidelog.v1 import tidelog_pb2_grpc

T = TypeVar("T")


def wait_for(condition: Callable[[], T | None], timeout: float = 30.0, what: str = "") -> T:
    """Poll until `condition` returns something truthy; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except grpc.RpcError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(0.02)


def make_batch(values: list[bytes], timestamp_ms: int | None = None, **kw: int) -> bytes:
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return build_batch([RecordInput(v, None, ts) for v in values], **kw)


def values_of(records: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every data record in fetched bytes (control batches skipped)."""
    out = []
    for pos, header in iter_batches(records):
        if not header.is_control:
            out.extend((r.offset, r.value) for r in decode_records(records, pos, header))
    return out


class Raw:
    """Raw stubs to every node of a LocalCluster."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self._channels: dict[str, grpc.Channel] = {}

    def stub(self, node_id: int) -> tidelog_pb2_grpc.TidelogStub:
        address = self.cluster.address_of(node_id)
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc.insecure_channel(address)
        return tidelog_pb2_grpc.TidelogStub(channel)

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()

    def metadata(self, node_id: int, topic: str) -> pb.TopicMetadata:
        return self.stub(node_id).Metadata(pb.MetadataRequest(topics=[topic]), timeout=5).topics[0]

    def create_topic(self, name: str, partitions: int, rf: int, **configs: str) -> None:
        def created() -> pb.CreateTopicsResponse | None:
            answer = self._create(name, partitions, rf, configs)
            return None if for_code(answer.topics[0].error_code) is NotControllerError else answer

        response = wait_for(created, what=f"a controller to create {name}")
        assert response.topics[0].error_code == 0, response
        self.wait_leaders(name, partitions)

    def _create(
        self, name: str, partitions: int, rf: int, configs: dict[str, str]
    ) -> pb.CreateTopicsResponse:
        node = self.cluster.node_ids[0]
        return self.stub(node).CreateTopics(
            pb.CreateTopicsRequest(
                topics=[
                    pb.CreatableTopic(
                        name=name,
                        num_partitions=partitions,
                        replication_factor=rf,
                        configs={k.replace("_", "."): v for k, v in configs.items()},
                    )
                ],
                timeout_ms=15_000,
            ),
            timeout=20,
        )

    def wait_leaders(self, topic: str, partitions: int, timeout: float = 30.0) -> list[int]:
        """Leaders of every partition once all live nodes agree on them."""

        def agreed() -> list[int] | None:
            views = []
            for node in self.cluster.node_ids:
                if not self.cluster.is_running(node):
                    continue
                md = self.metadata(node, topic)
                if md.error_code or len(md.partitions) != partitions:
                    return None
                views.append([p.leader_id for p in md.partitions])
            if views and all(v == views[0] for v in views) and min(views[0]) >= 0:
                live = [n for n in views[0] if self.cluster.is_running(n)]
                return views[0] if len(live) == len(views[0]) else None
            return None

        return wait_for(agreed, timeout, f"leaders of {topic}")

    def produce(
        self, node: int, topic: str, partition: int, batch: bytes, acks: int = -1,
        timeout_ms: int = 10_000,
    ) -> pb.PartitionProduceResponse:
        response = self.stub(node).Produce(
            pb.ProduceRequest(
                acks=acks,
                timeout_ms=timeout_ms,
                topics=[
                    pb.TopicProduceData(
                        name=topic,
                        partitions=[pb.PartitionProduceData(partition=partition, records=batch)],
                    )
                ],
            ),
            timeout=timeout_ms / 1000 + 5,
        )
        return response.topics[0].partitions[0]

    def fetch(
        self, node: int, topic: str, partition: int, offset: int, *, replica_id: int = -1,
        isolation: int = 0, max_bytes: int = 1 << 20, epoch: int = -1,
    ) -> pb.FetchPartitionData:
        response = self.stub(node).Fetch(
            pb.FetchRequest(
                replica_id=replica_id,
                max_bytes=max_bytes,
                isolation_level=isolation,
                topics=[
                    pb.FetchTopic(
                        name=topic,
                        partitions=[
                            pb.FetchPartition(
                                partition=partition,
                                fetch_offset=offset,
                                current_leader_epoch=epoch,
                            )
                        ],
                    )
                ],
            ),
            timeout=10,
        )
        return response.topics[0].partitions[0]

    def fetch_all(self, node: int, topic: str, partition: int, **kw: int) -> bytes:
        """Every batch from offset 0 up to the requester's bound."""
        data = b""
        offset = 0
        while True:
            part = self.fetch(node, topic, partition, offset, **kw)
            assert part.error_code == 0, part
            if not part.records:
                return data
            data += part.records
            last = None
            for _, header in iter_batches(part.records):
                last = header
            assert last is not None
            offset = last.next_offset

    def list_offset(
        self, node: int, topic: str, partition: int, timestamp: int, *, replica_id: int = -1,
        isolation: int = 0, epoch: int = -1, max_num_offsets: int = 0,
    ) -> pb.ListOffsetsPartitionResponse:
        response = self.stub(node).ListOffsets(
            pb.ListOffsetsRequest(
                replica_id=replica_id,
                isolation_level=isolation,
                topics=[
                    pb.ListOffsetsTopic(
                        name=topic,
                        partitions=[
                            pb.ListOffsetsPartition(
                                partition=partition,
                                timestamp=timestamp,
                                current_leader_epoch=epoch,
                                max_num_offsets=max_num_offsets,
                            )
                        ],
                    )
                ],
            ),
            timeout=10,
        )
        return response.topics[0].partitions[0]
