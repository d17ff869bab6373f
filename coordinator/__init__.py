"""Group (consumer offsets) and transaction coordinators hosted by nodes."""
