"""Where ``porter.load`` reads from: a local folder, or a Hugging Face Hub repo through ``huggingface_hub``.

How a source is read (so that a repo id is never taken for a local path, nor the reverse):

* an ``os.PathLike`` (``pathlib.Path``) is always a local folder;
* a string starting with ``hf://`` is always a Hub repo id (``hf://owner/name``);
* any other string that exists on disk is a local folder (as mlx-lm and transformers do);
* a string that does not exist is a Hub repo id only when it has the form ``owner/name`` exactly (one ``/``,
  letters, digits, ``-_.``; nothing path-like: no leading ``/``, ``./``, ``~``, no ``..``); anything else is a
  missing folder (``FileNotFoundError``).

A Hub download is ``snapshot_download`` of the artifact's files only (``*.json``, ``*.safetensors``,
``README.md``) into the Hub cache (``HF_HOME`` / ``HF_HUB_CACHE``; ``HF_HUB_OFFLINE=1`` or
``local_files_only=True`` use the cache only); the snapshot folder it returns then goes through every check a
local folder gets. ``huggingface_hub`` is an optional extra (``pip install 'porter-mlx[hub]'``).
"""

from __future__ import annotations

import os
import re

HUB_PREFIX = "hf://"
HUB_FILES = ["*.json", "*.safetensors", "README.md"]
# a Hub repo id: owner/name, letters, digits, '-', '_', '.', no '--' or '..', not ending in '.' or '-' (the Hub's rule)
REPO_ID = re.compile(r"(?!.*(--|\.\.))[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(?<![.-])")

__all__ = ["HUB_PREFIX", "REPO_ID", "is_repo_id", "check_repo_id", "resolve_source"]


def is_repo_id(text) -> bool:
    """Whether ``text`` has the form of a Hub repo id (``owner/name``)."""
    return isinstance(text, str) and bool(REPO_ID.fullmatch(text))


def check_repo_id(value, argument: str) -> str:
    """``value`` when it is a Hub repo id (``owner/name``), else a ValueError naming ``argument``."""
    if not is_repo_id(value):
        raise ValueError(f"{argument!r} must be a Hub repo id such as 'owner/name', but got {str(value)[:80]!r}")
    return value


def resolve_source(source, *, revision=None, local_files_only=False) -> str:
    """The local folder to load ``source`` from (downloading a Hub repo into the cache first).

    Raises:
        TypeError: ``source`` is neither a string nor a path.
        ValueError: ``revision`` given for a local folder, or an ``hf://`` source that is not a repo id.
        FileNotFoundError: no such folder, or the repo cannot be fetched (or found in the cache offline).
    """
    if isinstance(source, os.PathLike):
        return _local(os.fspath(source), revision)
    if not isinstance(source, str):
        raise TypeError(f"porter.load: 'source' must be a folder path or a Hub repo id, but got "
                        f"{type(source).__name__}")
    if source.startswith(HUB_PREFIX):
        repo_id = source[len(HUB_PREFIX):]
        if not is_repo_id(repo_id):
            raise ValueError(f"porter.load: {source!r} does not name a Hub repo ('hf://owner/name')")
        return _download(repo_id, revision, local_files_only)
    if os.path.lexists(source) or not is_repo_id(source):
        return _local(source, revision)
    return _download(source, revision, local_files_only)


def _local(directory: str, revision) -> str:
    if revision is not None:
        raise ValueError(f"porter.load: 'revision' applies to a Hub repo, but {directory!r} is a local path")
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"porter.load: {directory!r} is not a directory")
    return directory


def _download(repo_id: str, revision, local_files_only: bool) -> str:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise FileNotFoundError(
            f"porter.load: {repo_id!r} is not a local folder, and loading it from the Hugging Face Hub needs "
            "huggingface_hub: pip install 'porter-mlx[hub]' (or give a folder path, e.g. './name')") from None
    try:
        return snapshot_download(repo_id, revision=revision, allow_patterns=HUB_FILES,
                                 local_files_only=bool(local_files_only), library_name="porter")
    except Exception as e:  # noqa: BLE001  (the library's errors: offline miss, unknown repo, network, auth)
        reason = (str(e).splitlines() or [""])[0][:300]
        raise FileNotFoundError(f"porter.load: {repo_id!r} is not a local folder and cannot be fetched from the "
                                f"Hugging Face Hub ({type(e).__name__}: {reason})") from e
