"""The level and destination of dynsource's log lines in Spark's Python workers.

Planning and reading run in Python workers, processes that share no logging
configuration with the driver: ``logging.getLogger("dynsource").setLevel(...)``
in the driver does not reach them, and without a handler Python prints only
WARNING and above. Each worker entry point of the source therefore calls
:func:`configure_worker` with the level chosen for the scan: the reader option
``logLevel``; else the level the driver's ``dynsource`` logger had when
``dynsource.register(spark)`` ran; else ``$DYNSOURCE_LOG_LEVEL`` in the
worker's environment (Spark's ``spark.executorEnv.DYNSOURCE_LOG_LEVEL`` on a
cluster); else WARNING. Lines go to the worker's stderr, which Spark shows on
the console in local mode and keeps in the executor's ``stderr`` log on a
cluster.
"""

from __future__ import annotations

import logging
import os
import sys

LEVEL_ENV = "DYNSOURCE_LOG_LEVEL"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_LEVEL = "WARNING"
_LOGGER = "dynsource"


def parse_level(option: str, value: str) -> str:
    """``value`` as a level name; an error names ``option`` and the levels."""
    level = str(value).strip().upper()
    if level not in LEVELS:
        raise ValueError(f"{option} {value!r} is not a log level; expected one of {list(LEVELS)}.")
    return level


def driver_level() -> str | None:
    """The level set on this process's ``dynsource`` logger, or None when none was set."""
    level = logging.getLogger(_LOGGER).level
    return logging.getLevelName(level) if level != logging.NOTSET else None


def configure_worker(level: str | None) -> None:
    """Log dynsource's lines in this Python worker at ``level`` (None: ``$DYNSOURCE_LOG_LEVEL``, else WARNING)."""
    chosen = level or parse_level(f"${LEVEL_ENV}", os.environ.get(LEVEL_ENV) or DEFAULT_LEVEL)
    logger = logging.getLogger(_LOGGER)
    logger.setLevel(chosen)
    # A process that already logs somewhere (a driver that calls the source itself) keeps its handlers.
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
