"""The coordinators' runtime: the internal topics, the generic driver that runs a
deterministic state machine (`tidelog.coordinator`) over each partition this node leads, and
the group, consumer-group and transaction drivers on it. See docs/architecture/rooms.md."""
