"""Logging fixtures' bodies shared by the log-format tests: a logger writing to a buffer
through a given formatter, and the root logger put back after ``configure_logging``."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def captured_logger(name: str, formatter: logging.Formatter,
                    ) -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """Logger ``name`` at DEBUG writing through ``formatter`` to a buffer only (not to the
    root logger); its handler is removed on the way out."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(formatter)
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, buffer
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


@contextlib.contextmanager
def root_logging_restored() -> Iterator[None]:
    """The root logger's handlers and level (and warnings not captured) as they were, the
    handlers added meanwhile closed."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.captureWarnings(False)
