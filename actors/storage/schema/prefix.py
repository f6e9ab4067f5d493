"""The prefix of every key name of the schema (part of
:mod:`vmpooler.actors.storage.schema`, whose key functions are the only ones to use it)."""

from __future__ import annotations

__all__ = ["PREFIX"]

PREFIX = "vmpooler__"
"""vmpooler 3.9.1's prefix of every key name (reference §2.1)."""
