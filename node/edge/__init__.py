"""What guards a node's listeners before any handler runs: TLS and principals, request limits,
malformed input, the interceptors' shared shape. See docs/architecture/rooms.md."""
