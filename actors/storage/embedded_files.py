"""The embedded redis-server's data directory: who may read it, and its password.

The directory holds every token and VM of the service (``appendonly.aof``) and the server's
password (``redis.password``), so it is the service user's alone: the directory ``0700``,
everything in it ``0600`` (subdirectories ``0700``). :func:`secure_data_dir` creates it so,
or tightens one made by an older vmpooler (or by hand) and says what it changed; it refuses
a directory, or anything in it, owned by another user, and a symbolic link or special file
where the password or port file belongs.

The password is generated once (:func:`ensure_password`) and kept in the directory, so a
restart finds its data and its password, and every process that uses the server (``vmpooler
api``, ``dlq``, tools) reads it from there (:func:`read_password`). An explicit ``:redis:
password`` is the server's password instead, and the file records it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "PASSWORD_FILE",
    "PORT_FILE",
    "DataDirError",
    "Tightened",
    "ensure_password",
    "read_password",
    "read_port",
    "secure_data_dir",
    "write_private",
]

log = logging.getLogger(__name__)

PASSWORD_FILE = "redis.password"
"""Name of the file, in the data directory, holding the embedded server's password."""

PORT_FILE = "redis.port"
"""Name of the file, in the data directory, holding the embedded server's port."""

DIR_MODE = 0o700
FILE_MODE = 0o600


class DataDirError(RuntimeError):
    """The data directory or one of its files cannot be made private, or read."""


@dataclass(frozen=True)
class Tightened:
    """A file or directory whose group/other permissions :func:`secure_data_dir` removed."""

    path: Path
    old_mode: int
    new_mode: int

    def __str__(self) -> str:
        return f"{self.path} {self.old_mode:04o} -> {self.new_mode:04o}"


def _owner_check(path: Path, info: os.stat_result) -> None:
    uid = os.geteuid()
    if info.st_uid != uid:
        raise DataDirError(
            f"{path} belongs to uid {info.st_uid}, not to the user running vmpooler (uid {uid});"
            " the embedded Redis keeps its data and password there: chown it to this user or"
            " set another :redis: data_dir")


def _tighten(path: Path, info: os.stat_result, changed: list[Tightened]) -> None:
    _owner_check(path, info)
    current = stat.S_IMODE(info.st_mode)
    if current & 0o077:
        os.chmod(path, current & 0o700, follow_symlinks=False)
        changed.append(Tightened(path, current, current & 0o700))


def secure_data_dir(data_dir: Path) -> list[Tightened]:
    """Create ``data_dir`` (mode 0700) if missing, else make it and everything in it private:
    group and other permissions are removed from the directory, its files and subdirectories
    (one :class:`Tightened` per change, returned). Symbolic links in it are left alone (the
    server writes none). Raises :class:`DataDirError` when the directory or an entry belongs
    to another user, when it is not a directory, and when the password or port file is not a
    regular file."""
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        data_dir.mkdir(mode=DIR_MODE)
    info = os.lstat(data_dir)
    if not stat.S_ISDIR(info.st_mode):
        raise DataDirError(f"{data_dir} is not a directory")
    changed: list[Tightened] = []
    _tighten(data_dir, info, changed)
    for top, dirs, files in os.walk(data_dir):
        for name in [*dirs, *files]:
            path = Path(top) / name
            entry = os.lstat(path)
            if not stat.S_ISLNK(entry.st_mode):
                _tighten(path, entry, changed)
    for name in (PASSWORD_FILE, PORT_FILE):
        path = data_dir / name
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise DataDirError(f"{path} is not a regular file; remove it (vmpooler writes it)")
    return changed


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically, mode 0600 from its creation on: written to
    a new temporary file beside it (``O_EXCL``, so never one someone else made), then
    renamed over it. Readers see the old or the new content, never a part."""
    partial = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _read_private(path: Path) -> str | None:
    """The file's text, or None when it does not exist. Never follows a symbolic link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DataDirError(f"cannot read {path}: {exc.strerror}; run vmpooler as the user "
                           "that owns the embedded Redis's data directory") from None
    with os.fdopen(fd) as handle:
        return handle.read()


def read_password(data_dir: Path) -> str | None:
    """The embedded server's password from ``<data_dir>/redis.password``, or None when there
    is none (no server was ever started there by a vmpooler that sets one). Raises
    :class:`DataDirError` when the file exists but cannot be read."""
    text = _read_private(Path(data_dir) / PASSWORD_FILE)
    return None if text is None else text.strip() or None


def read_port(data_dir: Path) -> int | None:
    """The port a running embedded server wrote to ``<data_dir>/redis.port``, or None."""
    try:
        return int((Path(data_dir) / PORT_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def ensure_password(data_dir: Path, configured: str | None = None, *,
                    exposed: bool = False) -> str:
    """The password the embedded server is to require, recorded in ``redis.password``.

    ``configured`` (an explicit ``:redis: password``) wins: the file is rewritten with it when
    it held another (logged). Otherwise the file's password is reused; a new one is
    generated (``secrets.token_urlsafe(32)``) when there is none, when the file is empty, and
    when ``exposed`` (the file was readable by other users, so it may have been read;
    logged). Call with the data directory locked and secured, before the server starts."""
    path = Path(data_dir) / PASSWORD_FILE
    existing = read_password(data_dir)
    if configured is not None:
        if existing != configured:
            if existing is not None:
                log.warning("[!] [redis] :redis: password replaces the embedded server's "
                            "password in %s", path)
            write_private(path, configured)
        return configured
    if existing is not None and not exposed:
        return existing
    if existing is not None:
        log.warning("[!] [redis] %s was readable by other users; it now holds a new password",
                    path)
    password = secrets.token_urlsafe(32)
    write_private(path, password)
    return password
