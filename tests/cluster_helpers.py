"""Moved to tidelog.testing (wait_for, make_batch, values_of, Raw); this re-export goes once
every test imports them from there."""

from tidelog.testing import Raw, make_batch, values_of, wait_for

__all__ = ["Raw", "make_batch", "values_of", "wait_for"]
