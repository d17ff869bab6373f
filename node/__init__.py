"""The node process: wires storage, replication and the coordinators to gRPC."""
