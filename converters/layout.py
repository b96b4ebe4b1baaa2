"""Layouts as permutations.

A tensor's layout is a permutation ``perm`` of its torch dims: the MLX array holding torch tensor ``t`` is
``t.permute(perm)``, i.e. array axis ``i`` is torch dim ``perm[i]``. The identity is torch's own layout; channels-last
for a batched tensor is ``(0, 2, ..., r-1, 1)``. Ops with a ``dim`` argument translate it with :func:`axis_of`.
"""

from __future__ import annotations


def identity(rank: int) -> tuple:
    return tuple(range(rank))


def channels_last(rank: int) -> tuple:
    """(N, C, *S) -> (N, *S, C)."""
    if rank < 3:
        return identity(rank)
    return (0,) + tuple(range(2, rank)) + (1,)


def channels_last_unbatched(rank: int) -> tuple:
    """(C, *S) -> (*S, C)."""
    return tuple(range(1, rank)) + (0,)


def axis_of(perm: tuple, dim: int) -> int:
    """The array axis holding torch dim ``dim`` (negative dims wrap as in torch)."""
    rank = len(perm)
    if rank == 0:  # torch takes dim 0 / -1 of a 0-d tensor; an op that needs an array axis cannot
        raise NotImplementedError(f"dim {dim} of a 0-d tensor: this op is not supported on 0-d tensors with a dim")
    if dim < 0:
        dim += rank
    return perm.index(dim)


def to_layout_axes(src: tuple, dst: tuple) -> tuple:
    """Axes for ``array.transpose`` turning an array in layout ``src`` into layout ``dst``."""
    return tuple(src.index(d) for d in dst)


def moves_data(shape: list, src: tuple, dst: tuple) -> bool:
    """Whether changing ``src`` to ``dst`` reorders elements (size-1 dims do not count).

    ``shape`` is the torch shape from the example run (ints for static sizes, strings for dynamic ones).
    """
    keep = lambda p: [d for d in p if shape[d] != 1]  # noqa: E731
    return keep(src) != keep(dst)


def describe(perm: tuple) -> str:
    """Human-readable layout string used in ``input_layouts`` / ``output_layouts``."""
    rank = len(perm)
    if perm == identity(rank):
        return "as-is"
    named = {3: "NCL->NLC", 4: "NCHW->NHWC", 5: "NCDHW->NDHWC"}
    if rank in named and perm == channels_last(rank):
        return named[rank]
    return "permute" + str(tuple(perm)).replace(" ", "")


def permute_perm(perm: tuple, dims: tuple) -> tuple:
    """Layout of ``t.permute(dims)`` when ``t`` has layout ``perm`` and the array is left untouched."""
    rank = len(perm)
    dims = tuple(d % rank for d in dims)
    inverse = [0] * rank
    for new, old in enumerate(dims):
        inverse[old] = new
    return tuple(inverse[p] for p in perm)


def remove_dims(perm: tuple, dims) -> tuple:
    """Layout after the torch dims ``dims`` are removed (reduction without keepdim, select, squeeze)."""
    dims = sorted(set(dims))
    return tuple(p - sum(1 for d in dims if d < p) for p in perm if p not in dims)


def insert_dim(perm: tuple, dim: int) -> tuple:
    """Layout after a size-1 torch dim is inserted at ``dim``; the new array axis goes right after torch dim
    ``dim - 1``'s axis (or first), so channels-last stays channels-last."""
    shifted = [p + 1 if p >= dim else p for p in perm]
    pos = 0 if dim == 0 else shifted.index(dim - 1) + 1
    return tuple(shifted[:pos] + [dim] + shifted[pos:])


def insert_axis_position(perm: tuple, dim: int) -> int:
    """The array axis where :func:`insert_dim` puts the new dim."""
    return insert_dim(perm, dim).index(dim)
