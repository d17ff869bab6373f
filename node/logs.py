"""A node's log: text lines for people, or JSON lines (``log.format=json``) for pipelines.

A JSON line is one object: ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``,
``node``, ``message`` (formatted), the fields a call passed in ``extra`` (``topic``,
``partition``, ``term``, ``event``...) as they were given, and ``exception`` with the traceback
when there is one. Python warnings and exceptions that escape everything go through the same
handler, so that every line the process writes parses.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

#: What every LogRecord carries: anything else on a record came from a call's ``extra``.
_STANDARD_FIELDS = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__
) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def __init__(self, node_id: int) -> None:
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "node": self.node_id,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_FIELDS and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, default=str)


def configure(node_id: int, log_format: str) -> None:
    """The root logger at INFO, writing to stderr in `log_format` ("text" or "json")."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter(node_id))
        logging.captureWarnings(True)
        sys.excepthook = _log_uncaught
    else:
        handler.setFormatter(
            # A joining node has no id until the controller assigns one (then it configures
            # its logs again).
            logging.Formatter(
                f"%(asctime)s node-{node_id if node_id >= 0 else '?'} %(levelname)s %(message)s"
            )
        )
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


def _log_uncaught(
    kind: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    logging.getLogger("tidelog.node").critical("uncaught exception", exc_info=(kind, exc, tb))
