"""HTTP Basic authentication against the ``:auth:`` provider (reference §0, §3.4).

``authenticate(req, ctx)`` returns the user named by the request's Basic credentials or
raises :class:`ApiError` 401 ``{"ok": false}`` with ``WWW-Authenticate: Basic
realm="Authentication required"``, exactly as vmpooler's ``need_auth!``. Providers:

* ``dummy`` — accepts any credentials whose username differs from the password.
* ``ldap`` (``ldap3``) — plain mode: a simple bind as ``<user_object>=<user>,<base>`` for
  every base × user_object pair until one succeeds. Service-account mode (a
  ``service_account_hash`` is configured): for every pair, bind as the service account,
  search ``(<user_object>=<user>)`` under the base and bind as the first DN found with the
  user's password (net-ldap's ``bind_as``).

Differences from vmpooler, all on the safe side:

* an empty password is refused before any bind (an LDAP simple bind with an empty password
  is an *unauthenticated* bind that many servers accept);
* the username is escaped for the DN (RFC 4514) and the search filter (RFC 4515);
* connecting and each answer are bounded by :data:`LDAP_TIMEOUT` seconds; an unreachable or
  failing server is logged and answers 401, never 500, and no further pair is tried;
* with ``encryption`` configured, the server certificate is verified against the system CAs
  (or ``tls_options`` ``ca_file``/``ca_path``) unless ``tls_options: verify_mode: 0``.
* the user of a login is one name per account (docs/security.md "One user per account"):
  after an LDAP bind, the entry's own identifier read on the bound connection
  (:mod:`vmpooler.web.ldap_identity`; ``BOB``, `` bob`` and ``ｂｏｂ`` bind as bob's entry
  and are all ``bob``), for ``dummy`` the typed name in its normal form
  (:func:`~vmpooler.actors.fairness.names.normal_user_name`); vmpooler keeps the name as
  typed.

With ``:quotas: ldap_groups``, :func:`login` also reads the user's groups on the connection
bound as the user (:mod:`vmpooler.web.ldap_groups`); a failure to read them is logged and
the login goes on without groups.

Failed logins are limited per user name and per client address before the provider is
asked (:mod:`vmpooler.web.login_guard`: 429 while locked out); that guard is the only part
that touches Redis. Calls block the request thread.
"""

from __future__ import annotations

import base64
import binascii
import logging
import math
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import falcon
import ldap3
from ldap3.core.exceptions import LDAPException
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import escape_rdn

from vmpooler.actors.fairness.names import normal_user_name
from vmpooler.actors.fairness.quota_policy import LdapGroups
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import unauthorized
from vmpooler.web.ldap_groups import read_groups
from vmpooler.web.ldap_identity import LdapEntry, entry_user, read_entry
from vmpooler.web.login_guard import LoginGuard

__all__ = ["LDAP_TIMEOUT", "REALM_HEADER", "Account", "authenticate", "basic_credentials",
           "check_credentials", "check_ldap", "ldap_account", "ldap_login", "login"]

Groups = tuple[str, ...]
"""A user's groups as read from LDAP, sorted."""


@dataclass(frozen=True, slots=True)
class Account:
    """Whom the provider accepted: ``user`` in its normal form (for LDAP, the entry's own
    identifier) and its LDAP ``groups`` (empty when not read or not LDAP)."""

    user: str
    groups: Groups = ()

log = logging.getLogger(__name__)

LDAP_TIMEOUT = 5
"""Whole seconds allowed to connect to the LDAP server and for each of its answers."""

_INVALID_CREDENTIALS = 49
"""LDAP result code of a bind refused for a wrong DN or password (not worth a log line)."""

REALM_HEADER = {"WWW-Authenticate": 'Basic realm="Authentication required"'}
"""The header vmpooler sends with every 401."""


class _LdapDownError(Exception):
    """The LDAP server could not be reached or failed: stop trying other pairs."""


def basic_credentials(req: falcon.Request) -> tuple[str, str] | None:
    """``(user, password)`` from an ``Authorization: Basic`` header, or None."""
    header = req.get_header("Authorization") or ""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic" or not encoded.strip():
        return None
    try:
        raw = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    user, colon, password = text.partition(":")
    return (user, password) if colon else None


def authenticate(req: falcon.Request, ctx: ApiContext, guard: LoginGuard | None = None) -> str:
    """The authenticated user of ``req`` (:class:`Account` ``user``); raises 401 unless the
    provider accepts it, and 429 without asking the provider while the user name or the
    client address is locked out by ``guard`` (:mod:`vmpooler.web.login_guard`; one is
    built from ``ctx`` if None)."""
    return login(req, ctx, guard, groups=None)[0]


def login(req: falcon.Request, ctx: ApiContext, guard: LoginGuard | None = None, *,
          groups: LdapGroups | None) -> tuple[str, Groups | None]:
    """:func:`authenticate`, and the user's groups read as ``groups`` says when the
    provider is ``ldap`` (None: not read)."""
    credentials = basic_credentials(req)
    if credentials is None or not ctx.config.auth:
        raise unauthorized()
    user, password = credentials
    guard = guard if guard is not None else LoginGuard(ctx)
    pending = guard.begin(req, user)
    accepted = _accepts(ctx.config.auth, user, password, groups)
    if accepted is None:
        raise unauthorized()
    guard.succeeded(pending)
    ldap = ctx.config.auth.get("provider") == "ldap" and groups
    return accepted.user, accepted.groups if ldap else None


def check_credentials(auth: Mapping[str, Any], user: str, password: str) -> bool:
    """Whether the ``:auth:`` provider accepts ``user``/``password``; never raises."""
    return _accepts(auth, user, password, None) is not None


def _accepts(auth: Mapping[str, Any], user: str, password: str,
             groups: LdapGroups | None) -> Account | None:
    """None when the provider refuses ``user``, else the account: for ``dummy`` the typed
    name in its normal form (a name that is empty in that form is refused)."""
    provider = auth.get("provider")
    if provider == "dummy":
        name = normal_user_name(user)
        return Account(name) if name and user != password else None
    if provider == "ldap":
        ldap = auth.get("ldap")
        if not isinstance(ldap, Mapping):
            log.error("[!] [auth] ldap provider configured without an :ldap: section")
            return None
        return ldap_account(ldap, user, password, groups=groups)
    log.error("[!] [auth] unknown auth provider %r: refusing every request", provider)
    return None


def _option(section: Mapping[str, Any] | None, name: str) -> Any:
    """A key written plain or as a Ruby symbol (``name`` or ``:name``)."""
    if not isinstance(section, Mapping):
        return None
    return section.get(name, section.get(f":{name}"))


def _words(value: Any) -> list[str]:
    """vmpooler's reading of ``base``/``user_object``: a list, or a string split on spaces."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, Sequence):
        return [str(item) for item in value]
    return []


def _tls(encryption: Any) -> tuple[bool, bool, ldap3.Tls | None]:
    """``(use_ssl, start_tls, tls)`` from vmpooler's ``encryption`` mapping."""
    method = str(_option(encryption, "method") or "").lstrip(":")
    if method not in ("simple_tls", "start_tls"):
        if method:
            log.error("[!] [auth] unknown ldap encryption method %r: using none", method)
        return False, False, None
    options = _option(encryption, "tls_options")
    verify_mode = _option(options, "verify_mode")
    no_verify = verify_mode in (0, "0") or str(verify_mode).upper().endswith("VERIFY_NONE")
    tls = ldap3.Tls(validate=ssl.CERT_NONE if no_verify else ssl.CERT_REQUIRED,
                    ca_certs_file=_option(options, "ca_file"),
                    ca_certs_path=_option(options, "ca_path"))
    return method == "simple_tls", method == "start_tls", tls


class _Directory:
    """One LDAP server as configured: opens bounded connections and binds."""

    def __init__(self, ldap: Mapping[str, Any], timeout: float) -> None:
        use_ssl, self.start_tls, tls = _tls(_option(ldap, "encryption"))
        self.label = f"{_option(ldap, 'host')}:{_option(ldap, 'port') or 389}"
        self.timeout = max(1, math.ceil(timeout))  # ldap3 packs whole seconds into SO_RCVTIMEO
        self.server = ldap3.Server(str(_option(ldap, "host")),
                                   port=int(_option(ldap, "port") or 389), use_ssl=use_ssl,
                                   tls=tls, get_info=ldap3.NONE, connect_timeout=timeout)

    def bind(self, dn: str, password: str) -> ldap3.Connection | None:
        """A connection bound as ``dn``, or None if the server refused the credentials.

        Raises :class:`_LdapDownError` if the server cannot be reached or fails.
        """
        conn = ldap3.Connection(self.server, user=dn, password=password,
                                authentication=ldap3.SIMPLE, auto_bind=ldap3.AUTO_BIND_NONE,
                                receive_timeout=self.timeout, raise_exceptions=False)
        try:
            conn.open()
            if self.start_tls and not conn.start_tls():
                raise _LdapDownError(f"StartTLS refused: {conn.result}")
            if conn.bind():
                return conn
            code = (conn.result or {}).get("result")
            if code != _INVALID_CREDENTIALS:
                log.warning("[!] [auth] ldap %s: bind as %r refused: %s", self.label, dn,
                            (conn.result or {}).get("description"))
        except (LDAPException, OSError) as exc:
            raise _LdapDownError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            if not conn.bound:
                _close(conn)
        return None

    def find(self, conn: ldap3.Connection, base: str, search: str) -> str | None:
        """The DN of the first entry matching ``search`` under ``base``, or None."""
        try:
            conn.search(base, search, search_scope=ldap3.SUBTREE,
                        attributes=ldap3.NO_ATTRIBUTES, time_limit=self.timeout)
        except (LDAPException, OSError) as exc:
            raise _LdapDownError(f"search {search!r} under {base!r}: {exc}") from exc
        for entry in conn.response or []:
            if entry.get("type") == "searchResEntry" and entry.get("dn"):
                return str(entry["dn"])
        return None


def _close(conn: ldap3.Connection) -> None:
    """Unbind and close the socket (ldap3 leaves it open when connecting failed)."""
    try:
        conn.unbind()
    except (LDAPException, OSError):
        log.debug("[auth] ldap unbind failed", exc_info=True)
    finally:
        sock = getattr(conn, "socket", None)
        if sock is not None:
            sock.close()


def check_ldap(ldap: Mapping[str, Any], user: str, password: str,
               timeout: float = LDAP_TIMEOUT) -> bool:
    """Whether the LDAP server of ``:auth: :ldap:`` accepts ``user``/``password``.

    Never raises: a server that is unreachable, too slow or failing counts as a refusal
    and is logged once.
    """
    return ldap_account(ldap, user, password, timeout=timeout) is not None


def ldap_login(ldap: Mapping[str, Any], user: str, password: str, *,
               groups: LdapGroups | None = None,
               timeout: float = LDAP_TIMEOUT) -> Groups | None:
    """:func:`check_ldap`, answering None for a refusal and, for an accepted user, its
    groups read as ``groups`` says (empty when None, or when reading them failed: logged)."""
    account = ldap_account(ldap, user, password, groups=groups, timeout=timeout)
    return None if account is None else account.groups


def ldap_account(ldap: Mapping[str, Any], user: str, password: str, *,
                 groups: LdapGroups | None = None,
                 timeout: float = LDAP_TIMEOUT) -> Account | None:
    """The account ``user``/``password`` binds as (its user: the entry's own identifier,
    :mod:`vmpooler.web.ldap_identity`; its groups as :func:`ldap_login`), or None for a
    refusal. Never raises."""
    if not user or not password:
        return None
    bases, objects = _words(_option(ldap, "base")), _words(_option(ldap, "user_object"))
    service = _option(ldap, "service_account_hash")
    try:
        directory = _Directory(ldap, timeout)
        for base in bases:
            for user_object in objects:
                if service:
                    found = _bind_as(directory, service, base, user_object, user, password,
                                     groups)
                else:
                    found = _bind_plain(directory, base, user_object, user, password, groups)
                if found is not None:
                    return found
    except _LdapDownError as exc:
        log.warning("[!] [auth] ldap %s: %s", _option(ldap, "host"), exc)
    except Exception:  # the boundary: a bug or odd config must answer 401, never 500
        log.exception("[!] [auth] ldap %s: unexpected failure", _option(ldap, "host"))
    return None


def _account(directory: _Directory, conn: ldap3.Connection, dn: str, user_object: str,
             user: str, groups: LdapGroups | None) -> Account:
    """The account bound on ``conn``: its own identifier and groups (empty without
    ``groups``); closes ``conn``. A failure to read either is logged: the typed name in its
    normal form is then the user, and no group is given."""
    try:
        entry = LdapEntry(dn)
        try:
            entry = read_entry(conn, dn, user_object, directory.timeout)
        except (LDAPException, OSError) as exc:
            log.warning("[!] [auth] ldap %s: the entry of %r could not be read: %s",
                        directory.label, user, exc)
        name, from_entry = entry_user(entry, user_object, user)
        if not from_entry:
            log.warning("[!] [auth] ldap %s: no %s read from the entry of %r: the user is the "
                        "name as typed, in its normal form", directory.label, user_object, user)
        return Account(name, _groups_of(directory, conn, entry.dn, name, groups))
    finally:
        _close(conn)


def _groups_of(directory: _Directory, conn: ldap3.Connection, dn: str, user: str,
               groups: LdapGroups | None) -> Groups:
    """The groups of the user bound on ``conn`` (empty without ``groups``). A failure to
    read them is logged and gives no group."""
    if groups is None:
        return ()
    try:
        return read_groups(conn, dn, user, groups, directory.timeout)
    except Exception as exc:  # a group read never fails a login that succeeded
        log.warning("[!] [auth] ldap %s: the groups of %r could not be read: %s",
                    directory.label, user, exc)
        return ()


def _bind_plain(directory: _Directory, base: str, user_object: str, user: str,
                password: str, groups: LdapGroups | None) -> Account | None:
    dn = f"{user_object}={escape_rdn(user)},{base}"
    conn = directory.bind(dn, password)
    if conn is None:
        return None
    return _account(directory, conn, dn, user_object, user, groups)


def _bind_as(directory: _Directory, service: Any, base: str, user_object: str, user: str,
             password: str, groups: LdapGroups | None) -> Account | None:
    account = directory.bind(str(_option(service, "user_dn")),
                             str(_option(service, "password") or ""))
    if account is None:
        raise _LdapDownError(f"service account {_option(service, 'user_dn')!r} was refused")
    try:
        dn = directory.find(account, base, f"({user_object}={escape_filter_chars(user)})")
    finally:
        _close(account)
    if dn is None:
        return None
    conn = directory.bind(dn, password)
    if conn is None:
        return None
    return _account(directory, conn, dn, user_object, user, groups)
