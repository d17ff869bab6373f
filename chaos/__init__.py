"""Fault injection and the Jepsen-style checker for real-process chaos runs."""
