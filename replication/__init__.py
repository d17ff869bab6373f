"""Per-partition Raft: a deterministic consensus core (``raft``) and its simulator (``sim``)."""

from tidelog.replication.log_view import NO_EPOCH, Entry, MemoryLog, ReplicaLog
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
    Ready,
    Role,
    SafetyViolation,
)

__all__ = [
    "NO_EPOCH",
    "AppendRequest",
    "AppendResponse",
    "BatchCodec",
    "Entry",
    "HardState",
    "Heartbeat",
    "HeartbeatResponse",
    "MemoryLog",
    "Message",
    "NotLeaderError",
    "OpaqueCodec",
    "PreVoteRequest",
    "PreVoteResponse",
    "RaftConfig",
    "RaftCore",
    "Ready",
    "ReplicaLog",
    "Role",
    "SafetyViolation",
    "TimeoutNow",
    "VoteRequest",
    "VoteResponse",
]
