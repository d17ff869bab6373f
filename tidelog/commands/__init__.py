"""Subcommands of the ``tidelog`` CLI, one module each, imported only when invoked."""
