"""API v3 resources: status (to be filled in)."""

from __future__ import annotations

import falcon

from vmpooler.web.context import ApiContext


def register(app: falcon.App, ctx: ApiContext, prefix: str) -> None:
    """Add this group's routes under ``prefix``."""
