"""The ``tidelog`` command line.

Each subcommand lives in its own module under ``tidelog.commands`` exposing
``configure(parser)`` and ``run(args) -> int``. A command module keeps its top-level imports
light and imports server packages inside ``run()``, so ``tidelog --help`` stays fast and a
client-only install never imports server code.
Errors that a user can cause end with a one-line message and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from tidelog.errors import TidelogError

#: name -> (module under tidelog.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "dump-log": ("dump_log", "print the batches, records and index entries of a segment"),
    "storage-demo": ("storage_demo", "write, roll, look up and reopen a partition log on disk"),
    "sim": ("sim", "run the deterministic Raft simulator for one seed or a range of seeds"),
    "node": ("node", "run one node in the foreground"),
    "cluster": ("cluster", "start, stop or inspect a local cluster of node processes"),
    "demo": ("demo", "a guided tour: a cluster, offsets by time, failovers, commits"),
    "topic": ("topic", "create, list, describe or delete topics"),
    "produce": ("produce", "send records from arguments or standard input"),
    "consume": ("consume", "print records from a position"),
    "offsets": ("offsets", "earliest, latest, max-timestamp or by-time offsets per partition"),
    "groups": ("groups", "list, describe, reset the offsets of, or delete consumer groups"),
    "delete-records": ("delete_records", "delete the records of partitions below an offset "
                       "(kafka-delete-records' flags and file)"),
    "log-dirs": ("log_dirs", "each node's log directory and replica sizes (kafka-log-dirs' "
                 "flags and JSON)"),
    "leader-election": ("leader_election", "make partitions' preferred replicas their leaders "
                        "(kafka-leader-election's flags)"),
    "acls": ("acls", "add, list or remove ACLs (kafka-acls' flags)"),
    "reassign": ("reassign", "move partition replicas between nodes "
                 "(kafka-reassign-partitions' flags and files)"),
    "configs": ("configs", "describe or alter topic and node configs (kafka-configs' flags)"),
    "transactions": ("transactions", "list, describe, find hanging or abort transactions "
                     "(kafka-transactions' commands)"),
    "chaos": ("chaos", "run a workload under injected faults and check every invariant"),
    "perf": ("perf", "producer and consumer throughput and latency (Kafka's perf-test tools)"),
}


def build_parser() -> argparse.ArgumentParser:
    from tidelog.commands._common import Parser

    parser = Parser(prog="tidelog", description="Tidelog: a replicated log.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module_name, help_text) in COMMANDS.items():
        cmd_parser = sub.add_parser(name, help=help_text, description=help_text)
        cmd_parser.set_defaults(_module=module_name)
        module = importlib.import_module(f"tidelog.commands.{module_name}")
        module.configure(cmd_parser)
    return parser


#: The exit code of a writer whose reader went away (128 + SIGPIPE), what a shell shows for
#: kcat or cat in ``... | head -1``.
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    module = importlib.import_module(f"tidelog.commands.{args._module}")
    try:
        code = int(module.run(args))
        sys.stdout.flush()  # a reader gone by now is found here, not at the interpreter's exit
        return code
    except BrokenPipeError:
        # `tidelog consume t | head -1`: the reader has what it wanted. Python's advice: point
        # stdout at /dev/null so that the flush at exit does not fail again, and end quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except TidelogError as exc:
        print(f"tidelog {args.command}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file named on the command line that cannot be read or written
        print(f"tidelog {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
