"""The cluster's state on a node: the controller over its metadata log, registration and
fencing, where partitions are led, balancing and reassignments. See
docs/architecture/rooms.md."""
