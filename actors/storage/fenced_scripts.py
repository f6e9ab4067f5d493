"""A store's Lua scripts, each run plain or behind a lease's fence: :class:`FencedScripts`.

The pool store and the request store both register some scripts twice, as written and in
their fenced form (:func:`~vmpooler.actors.storage.schema.lease_scripts.fenced`), and give
views of themselves that run the fenced form behind one fence. What a caller may rely on:
:meth:`FencedScripts.with_fence` returns a copy (same client, same registered scripts) and
never changes the store it is called on; on a view with a fence, a script that has a fenced
form runs through :func:`~vmpooler.actors.storage.lease_store.run_fenced` (which raises
:class:`~vmpooler.actors.storage.lease_store.Fenced` when the lease holds anything else),
every other script as written.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Self

from redis.commands.core import Script

from vmpooler.actors.storage.lease_store import Fence, run_fenced

__all__ = ["FencedScripts"]


class FencedScripts:
    """Base of a store with scripts by name (``_scripts``) and fenced forms of some of them
    (``_fenced``); ``fence`` is None on the store itself (everything runs unfenced)."""

    _scripts: Mapping[str, Script]
    _fenced: Mapping[str, Script]
    fence: Fence | None = None

    def with_fence(self, fence: Fence | None) -> Self:
        """A view of this store whose fenced scripts run behind ``fence`` (None: unfenced).
        The other methods behave as this store's."""
        view = copy.copy(self)
        view.fence = fence
        return view

    def _run(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        fence = self.fence
        if fence is None or script not in self._fenced:
            return self._scripts[script](keys=list(keys), args=list(args))
        return run_fenced(self._fenced[script], fence, keys, args)
