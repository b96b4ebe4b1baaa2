"""How ``porter.load`` opens the files of an artifact folder: which symbolic links it follows, and what it reads.

An artifact may come from a stranger (a downloaded archive, a shared drive), and a file in it may be a symbolic
link. The Hugging Face cache is made of them (``snapshots/<commit>/graph.json -> ../../blobs/<hash>``, and with
the shared blob store ``blobs/<hash> -> ../../blobs/<2 hex>/<hash>``), so links are not refused outright. The
policy, applied to each file before a byte of it is read:

* a link is followed to its final target, which must be a regular file (not a directory, FIFO, device or socket:
  those would hang or never end) and must lie either inside the folder the user named (its real path), or, when
  that folder is a snapshot of a Hugging Face cache repo (``<cache>/<models|datasets|spaces>--<name>/snapshots/
  <commit>[/...]``), in that repo's ``blobs/`` or the cache's shared ``blobs/<2 hex>/`` store. Anything else
  (``/etc/passwd``, ``~/.ssh/id_rsa``, another model's weights) is refused, naming the link and its target;
* the file is opened (non-blocking, so a FIFO swapped in cannot hang the open), and the opened file must be the
  target that was checked (same device and inode) and a regular file of at most the caller's size limit;
* a file with more hard links than the folder itself holds names for (``st_nlink``) is refused: its other name
  may be anywhere on the filesystem (an archive extracted with its hard-link entries, a folder prepared by someone
  else), and what looks like a weight file could be another file of the user's, read and republished by ``porter
  export``. Hard links between the folder's own files (a deduplicated copy) are fine;
* the caller then reads at most that many bytes.

Writing is the other half (``converters/serialize.py``): every file of an artifact is written under a temporary
name and renamed into place, so a link planted in a folder is replaced, never written through.
"""

from __future__ import annotations

import os
import re
import stat

from .schema import ArtifactError

_HUB_REPO = re.compile(r"(models|datasets|spaces)--.+")
_SHARD_PREFIX = re.compile(r"[0-9a-f]{2}")

__all__ = ["open_member", "allowed_target"]


def _inside(path: str, folder: str) -> bool:
    return path != folder and os.path.commonpath([path, folder]) == folder


def _hub_blob_folders(folder: str) -> list:
    """The folders a Hugging Face cache snapshot's links may point into (none when ``folder`` is not one)."""
    path = folder
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return []
        if os.path.basename(path) == "snapshots" and _HUB_REPO.fullmatch(os.path.basename(parent)):
            return [os.path.join(parent, "blobs"), os.path.join(os.path.dirname(parent), "blobs")]
        path = parent


def allowed_target(folder: str, target: str) -> bool:
    """Whether the real path ``target`` may be read for a file of the artifact folder ``folder`` (a real path)."""
    if _inside(target, folder):
        return True
    repo_blobs, shared_blobs = _hub_blob_folders(folder) or (None, None)
    if repo_blobs is None:
        return False
    where = os.path.dirname(target)
    return where == repo_blobs or (os.path.dirname(where) == shared_blobs
                                   and _SHARD_PREFIX.fullmatch(os.path.basename(where)) is not None)


def _check_hard_links(path: str, real: str, info: os.stat_result) -> None:
    """Refuse the file ``path`` (real path ``real``) if its hard links are not all names in the real file's folder
    (an artifact folder or a Hub blob folder: few files)."""
    here = 0
    try:
        with os.scandir(os.path.dirname(os.path.abspath(real))) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                here += (st.st_dev, st.st_ino) == (info.st_dev, info.st_ino)
    except OSError:
        pass
    if info.st_nlink > here:
        raise ArtifactError(path, "the file", "", f"has {info.st_nlink} hard links, {info.st_nlink - here} of them "
                            "outside the model's folder: it may be another file of this machine under a model file's "
                            "name; Porter reads only files whose every name is in the folder (copy the file if you "
                            "trust it)")


def open_member(path: str, limit: int):
    """Open the artifact file ``path`` (a direct child of its folder) for reading under the policy above; returns
    ``(binary file, size)``.

    Raises:
        ArtifactError: a link leading outside the folder (and not into the Hub cache's blobs), a target that is not
            a regular file, a file larger than ``limit`` bytes, or one that cannot be opened.
    """
    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    target = None
    if os.path.islink(path):
        target = os.path.realpath(path)
        if not allowed_target(folder, target):
            raise ArtifactError(path, "the file", "", f"is a symbolic link to {target[:300]!r}, outside the model's "
                                "folder; Porter follows links only to files inside the folder, or from a Hugging Face "
                                "cache snapshot into its blobs (copy the file into the folder if you trust it)")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ArtifactError(path, "the file", "", f"cannot be opened ({e.strerror})") from None
    try:
        info = os.fstat(fd)
        if target is not None:
            try:
                checked = os.stat(target)
            except OSError:
                checked = None
            if checked is None or (checked.st_dev, checked.st_ino) != (info.st_dev, info.st_ino):
                raise ArtifactError(path, "the file", "", "changed while it was being opened (its link now leads "
                                    "elsewhere)")
        if stat.S_ISDIR(info.st_mode):
            raise ArtifactError(path, "the file", "", "is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise ArtifactError(path, "the file", "", "is not a regular file (a FIFO, device or socket)")
        if info.st_nlink > 1:
            _check_hard_links(path, target or path, info)
        if info.st_size > limit:
            raise ArtifactError(path, "the file", "", f"is {info.st_size} bytes, more than the {limit} bytes allowed")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb"), info.st_size
