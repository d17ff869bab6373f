"""``python -m tidelog.node``: the node process entry point that launchers spawn.

Same flags and errors as ``tidelog node``, but without building the whole CLI: a launcher
starting many nodes should not pay for (or depend on) every other command's imports.
"""

from __future__ import annotations

import argparse
import sys

from tidelog.commands import node
from tidelog.errors import TidelogError


def main() -> int:
    # kio, the Kafka codec the node imports when it serves, registers test-data strategies with
    # hypothesis whenever hypothesis is importable. An installed node has no hypothesis; a
    # development install has it for the tests, and there every node start paid about 0.35 s of
    # CPU (of ~0.85 for the node's imports) for strategies no node uses. Blocked, a development
    # node starts as an installed one does.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    parser = argparse.ArgumentParser(prog="python -m tidelog.node", description=node.__doc__)
    node.configure(parser)
    args = parser.parse_args()
    try:
        return node.run(args)
    except TidelogError as exc:
        print(f"tidelog node: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
