"""Small file-system helpers shared by the writers of artifacts (weights, shards, .mlxfn files, CLI output folders)."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager


def umask() -> int:
    """The process's file-creation mask (read by setting and restoring it): what a normal new file's mode drops."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def remove_quietly(path: str) -> None:
    """Remove the file ``path`` if it is there (cleanup after a failed write: a missing file is not an error)."""
    try:
        os.remove(path)
    except OSError:
        pass


def write_temporary_text(path: str, text: str) -> str:
    """Write ``text`` (UTF-8) under a temporary name beside ``path`` (``.<name>.tmp-*``) and return that name, for
    the caller to ``os.replace`` into place: renaming replaces a symbolic link planted at ``path`` instead of
    writing through it, and a reader never sees a half-written file. On any error the temporary file is removed."""
    folder = os.path.dirname(os.path.abspath(path))
    handle, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.tmp-", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp's 0600 -> a normal file
    except BaseException:
        remove_quietly(tmp)
        raise
    return tmp


@contextmanager
def folder_lock(directory: str):
    """Hold an exclusive ``flock`` on the folder itself (no lock file is made) while a writer writes and commits
    its files: two saves into one folder run one after the other, never interleaved (A's graph.json over B's
    weights). Yields whether the lock is held: advisory, and not held where ``fcntl`` is missing (Windows) or the
    file system refuses it (some network mounts)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux/macOS
        yield False
        return
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            locked = True
        except OSError:  # ENOLCK, EOPNOTSUPP: saving still works, unserialised
            locked = False
        yield locked
    finally:
        os.close(fd)  # releases the lock
