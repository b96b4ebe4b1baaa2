"""Write an output directory atomically: build it in a temporary sibling, move it into place only when complete.

A failed or interrupted command leaves nothing behind: not the temporary folder, not a half-written DIR, not the
parent folders it had to create, and an existing DIR replaced with --force survives until the new one is complete.
"""

import os
import shutil
import tempfile
from contextlib import contextmanager

from porter.converters.files import umask

from .errors import InputError


def check_destination(directory: str, force: bool, inputs=()) -> None:
    """Refuse early (before any slow work) an output Porter may not or cannot write.

    ``--force`` replaces a folder whole, so it is refused for a folder that is not a converted model Porter wrote
    (not empty and no ``graph.json``), that holds one of the command's ``inputs`` or the current directory, or is
    the home folder: ``-o . --force`` used to delete the working directory, the checkpoint included.
    """
    if os.path.lexists(directory):
        if not os.path.isdir(directory) or os.path.islink(directory):
            raise InputError(f"Output '{directory}' exists and is not a directory.",
                             "Choose another output with -o DIR, or remove that file.")
        if not force:
            raise InputError(f"Output directory '{directory}' already exists.",
                             "Pass --force to replace it, or choose another output with -o DIR.")
        _check_replaceable(directory, inputs)
    parent = _existing_ancestor(os.path.dirname(os.path.abspath(directory)))
    if not os.path.isdir(parent):
        raise InputError(f"Cannot create output directory '{directory}': '{parent}' is not a directory.",
                         "Choose another output with -o DIR.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"Cannot write output directory '{directory}': '{parent}' is not writable.",
                         "Choose a writable location with -o DIR, or fix the folder's permissions.")
    try:  # permission bits do not tell the whole story (root, read-only mounts): try it
        os.rmdir(tempfile.mkdtemp(prefix=".porter-probe-", dir=parent))
    except OSError as exc:
        raise InputError(f"Cannot write output directory '{directory}': '{parent}' refuses new folders "
                         f"({exc.strerror}).", "Choose a writable location with -o DIR.")


def _check_replaceable(directory: str, inputs) -> None:
    """``--force`` on an existing ``directory``: only a converted model folder (or an empty one), never one that
    holds the input, the current directory or the home folder."""
    real = os.path.realpath(directory)
    guarded = [(os.getcwd(), "the current directory"), (os.path.expanduser("~"), "your home folder")]
    guarded += [(path, f"the input '{path}'") for path in inputs if path]
    for path, what in guarded:
        inside = os.path.realpath(path)
        if inside == real or os.path.commonpath([inside, real]) == real:
            raise InputError(f"Output directory '{directory}' is or holds {what}: --force would delete it with the "
                             "folder.",
                             "Choose a new folder with -o DIR.")
    entries = os.listdir(directory)
    if entries and "graph.json" not in entries:
        raise InputError(f"Output directory '{directory}' is not a converted model (it holds {len(entries)} "
                         "entries and no graph.json): --force only replaces a folder Porter wrote.",
                         "Choose a new folder with -o DIR, or empty that one first.")


def _existing_ancestor(path: str) -> str:
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


@contextmanager
def atomic_directory(directory: str, force: bool = False, inputs=()):
    """Yield a temporary directory; on normal exit it becomes ``directory``, on any exception it disappears.

    Args:
        directory (str): the final output directory.
        force (bool): replace an existing ``directory`` (a converted model folder only). Default: ``False``.
        inputs (list of str): files the command reads, which ``directory`` must not hold. Default: none.
    """
    check_destination(directory, force, inputs)
    final = os.path.abspath(directory)
    parent = os.path.dirname(final)
    created = make_parents(parent)
    try:
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(final)}.tmp-", dir=parent)
    except OSError as exc:
        remove_created(created)
        raise InputError(f"Cannot write output directory '{directory}': {exc.strerror}.",
                         "Choose a writable location with -o DIR.")
    try:
        try:
            yield tmp
            os.chmod(tmp, 0o777 & ~umask())  # mkdtemp makes it 0700; a normal folder is what users expect
            _move_into_place(tmp, final, force)
        except OSError as exc:  # disk full, quota, permission changed under us: the user's problem, not a bug
            where = str(exc.filename or directory).replace(tmp, directory)  # the path the user asked for
            raise InputError(f"Cannot write output directory '{directory}': {exc.strerror or exc} ('{where}').",
                             "Free disk space or choose a writable location with -o DIR; nothing was written.")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_created(created)
        raise


def _move_into_place(tmp: str, final: str, force: bool) -> None:
    if not os.path.lexists(final):
        os.rename(tmp, final)
        return
    if not force:  # appeared while we were working
        raise InputError(f"Output directory '{final}' appeared while converting.", "Pass --force to replace it.")
    backup = tempfile.mkdtemp(prefix=f".{os.path.basename(final)}.old-", dir=os.path.dirname(final))
    os.rmdir(backup)
    os.rename(final, backup)
    try:
        os.rename(tmp, final)
    except BaseException:
        os.rename(backup, final)
        raise
    shutil.rmtree(backup, ignore_errors=True)


def make_parents(parent: str):
    """Create missing parent folders; return the ones created, deepest first, so a failure can remove them."""
    missing = []
    path = parent
    while not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        remove_created(missing)
        raise InputError(f"Cannot create output folder '{parent}': {exc.strerror}.",
                         "Choose a writable location with -o DIR.")
    return missing


def remove_created(created) -> None:
    for path in created:  # deepest first
        try:
            os.rmdir(path)
        except OSError:
            pass


def folder_problem(folder: str) -> str:
    """Why the missing ``folder`` of an output path cannot hold it (a file of that name is not a missing folder)."""
    if os.path.lexists(folder):
        return f"'{folder}' is not a folder"
    return f"the folder '{folder}' does not exist"


def check_file_destination(path: str, option: str) -> None:
    """Refuse early an output file ``option`` names that cannot be written: a directory, or a missing or read-only
    folder (an existing regular file is replaced, as a report is)."""
    if os.path.isdir(path):
        raise InputError(f"{option} '{path}' is a directory.", f"Give a file path for {option}.")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InputError(f"{option} '{path}': {folder_problem(folder)}.", "Choose another path, or create that folder.")
    try:  # permission bits do not tell the whole story (root, read-only mounts): try it
        os.remove(_probe(folder))
    except OSError as exc:
        raise InputError(f"{option} '{path}': cannot write in the folder '{folder}' ({exc.strerror}).",
                         "Choose a writable location.")


def _probe(folder: str) -> str:
    handle, probe = tempfile.mkstemp(prefix=".porter-probe-", dir=folder)
    os.close(handle)
    return probe


def write_text_file(path: str, text: str, option: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary sibling renamed over it: never a half-written file, and
    a link at ``path`` is replaced rather than written through)."""
    from porter.converters.files import write_temporary_text

    try:
        os.replace(write_temporary_text(path, text), path)
    except OSError as exc:
        raise InputError(f"Cannot write {option} '{path}': {exc.strerror or exc}.", "Choose a writable path.")
