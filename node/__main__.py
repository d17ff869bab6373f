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
