"""The client library's loggers: silent unless the application configures logging.

A library must not print into its application's output. The client logs through the standard
`logging` module under the `tidelog` logger, which carries a NullHandler (Python's advice for
libraries): nothing appears until the application sets up logging (`logging.basicConfig(...)`), and
then each event is one JSON object per line, as the services' own logs are, at the level the
application chose. The services configure logging at start, so the client's events inside them
join their JSON log stream.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import structlog

__all__ = ["LIBRARY_LOGGER", "get_logger"]

LIBRARY_LOGGER: Final = logging.getLogger("tidelog")
LIBRARY_LOGGER.addHandler(logging.NullHandler())

_PROCESSORS: Final[list[Any]] = [
    structlog.contextvars.merge_contextvars,
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.format_exc_info,
    structlog.processors.JSONRenderer(),
]


def get_logger(name: str) -> Any:
    """A structlog logger (keyword events) writing through the standard logger `name`."""
    assert name.startswith("tidelog."), name  # under the library's logger, so its NullHandler applies
    return structlog.wrap_logger(
        logging.getLogger(name), processors=_PROCESSORS, wrapper_class=structlog.stdlib.BoundLogger
    )
