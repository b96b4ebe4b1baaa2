"""Lists and dicts that modules share, kept shared across a capture (conversion only).

torch.export snapshots every module's plain attributes before tracing and, after it, puts back a copy of each list
and dict it found, one copy per module. Containers that several modules hold as one object stop being shared: MONAI's
DynUNet gives its ``heads`` list to every skip level, which writes its deep-supervision output into it for the
root's training forward to read; after an export the levels write into lists the root never reads, so the torch
model (and every later probe of it, and the user's model after ``porter.convert``) computes stale heads.
``shared_containers_kept`` puts each original object back, with the contents it had before the capture.
"""

from __future__ import annotations

from contextlib import contextmanager

from .capture_buffers import ContainerSnapshot


@contextmanager
def shared_containers_kept(model):
    """Around a capture of ``model``: every list and dict in a module's plain attributes is the same object after
    it, holding what it held before (writes the traced forward made into it undone): the conversion's own
    :class:`ContainerSnapshot`, taken before the capture and restored after it."""
    snapshot = ContainerSnapshot(model)
    try:
        yield
    finally:
        snapshot.restore()
