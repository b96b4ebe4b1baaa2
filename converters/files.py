"""Small file-system helpers shared by the writers of artifacts (weights, shards, .mlxfn files, CLI output folders)."""

from __future__ import annotations

import os


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
