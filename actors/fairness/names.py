"""The one spelling of a user name (docs/security.md "One user per account").

Every user name that is compared or counted goes through :func:`normal_user_name` first:
the name a client typed for ``dummy`` auth, the ``user`` field of a token hash (also one
written by an older version or by vmpooler, so ``Bob`` reads as ``bob``), the names of the
``:quotas:`` section (``users``, ``members``, ``high_priority``) and the failed-login guard's
per-user key. After an LDAP bind the user is the directory entry's own identifier, put
through the same function (:mod:`vmpooler.web.ldap_identity`).

What callers may rely on: the function is pure, total on ``str`` and idempotent
(``normal_user_name(normal_user_name(x)) == normal_user_name(x)``).
"""

from __future__ import annotations

import unicodedata

__all__ = ["normal_user_name"]


def normal_user_name(name: str) -> str:
    """``name`` in the normal form: Unicode NFKC (full-width ``ｂｏｂ`` is ``bob``), then
    case-folded (``BOB`` is ``bob``), then NFKC again (case folding can leave a string that
    is not normalised), then stripped of leading and trailing white space (`` bob `` is
    ``bob``). Inner white space is kept."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    return unicodedata.normalize("NFKC", folded).strip()
