"""Per-partition Raft: a deterministic consensus core (``raft``), the one driver that turns its
Readies into I/O (``driver``, with ``log_store`` on a storage log), and the simulator that runs
both over real logs on a simulated disk (``sim``, ``sim_disk``)."""

from tidelog.replication.membership import (
    ConfChange,
    ConfChangeError,
    ConfChangeType,
    ConfState,
    Membership,
)
from tidelog.replication.messages import (
    AppendRequest,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    Message,
    PreVoteRequest,
    PreVoteResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tidelog.replication.raft import (
    BatchCodec,
    HardState,
    NotLeaderError,
    OpaqueCodec,
    RaftConfig,
    RaftCore,
    ReadState,
    Ready,
    Role,
    SafetyViolation,
)
from tidelog.replication.replica_log import NO_EPOCH, Entry, MemoryLog, ReplicaLog

__all__ = [
    "NO_EPOCH",
    "AppendRequest",
    "AppendResponse",
    "BatchCodec",
    "ConfChange",
    "ConfChangeError",
    "ConfChangeType",
    "ConfState",
    "Entry",
    "HardState",
    "Heartbeat",
    "HeartbeatResponse",
    "Membership",
    "MemoryLog",
    "Message",
    "NotLeaderError",
    "OpaqueCodec",
    "PreVoteRequest",
    "PreVoteResponse",
    "RaftConfig",
    "RaftCore",
    "ReadState",
    "Ready",
    "ReplicaLog",
    "Role",
    "SafetyViolation",
    "TimeoutNow",
    "VoteRequest",
    "VoteResponse",
]
