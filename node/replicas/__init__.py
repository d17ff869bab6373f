"""The replicas a node hosts and the loops that drive their Raft cores: the replica set, one
partition's replica, reads, the node-to-node Raft transport, liveness, and the chores over the
logs. See docs/architecture/rooms.md."""
