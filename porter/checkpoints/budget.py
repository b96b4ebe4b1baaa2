"""Memory estimates made before anything is allocated: an absurd ``--input-shape`` (or one recorded in an
artifact) is refused with a message naming where it came from, instead of a 120 GB allocation and a crash.

The estimate for an input is its float32 bytes times :data:`ACTIVATION_FACTOR` (torch and MLX run the model side
by side during conversion and validation, each holding activations several times the input); it must fit in the
memory available now. Any single input above ``porter.max_elements()`` elements is refused too.
"""

import os

from porter import _meminfo

from .errors import CheckpointError

ACTIVATION_FACTOR = 8
MAX_RANK = 8


def available_bytes() -> int:
    """Memory available now (``MemAvailable`` on Linux, swap left out; physical memory elsewhere; 2**40 if unknown)."""
    return _meminfo.available_memory(swap=False, unknown=1 << 40)


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def check_input_shapes(shapes, origin: str) -> None:
    """Refuse input shapes whose conversion would not fit; ``origin`` names the option or file they came from."""
    from porter.converters.limits import max_elements

    total = 0
    for shape in shapes:
        text = ",".join(map(str, shape))
        if len(shape) > MAX_RANK:
            raise CheckpointError(f"Input shape {text} ({origin}) has {len(shape)} dims; Porter handles at most "
                                  f"{MAX_RANK}.", "Give the torch-layout shape of one input with --input-shape.")
        count = 1
        for d in shape:
            count *= d
        if count > max_elements():
            raise CheckpointError(f"Input shape {text} ({origin}) has {count} elements, more than the limit of "
                                  f"{max_elements()} elements per array.", "Give a smaller --input-shape (or raise "
                                  "the limit with PORTER_MAX_ELEMENTS if the model really needs it).")
        total += count
    need = total * 4 * ACTIVATION_FACTOR
    free = available_bytes()
    if need > free:
        given = ", ".join(",".join(map(str, s)) for s in shapes)
        raise CheckpointError(f"Input shape(s) {given} ({origin}) would need "
                              f"about {_gib(need)} to convert and validate, but only {_gib(free)} of memory is "
                              "available.", "Give a smaller --input-shape (a batch of 1 and a modest image size are "
                              "enough to convert and validate).")


def check_checkpoint_size(path: str) -> None:
    """Refuse a checkpoint whose weights cannot be held about three times over (torch, numpy, MLX copies)."""
    size = os.path.getsize(path)
    free = available_bytes()
    if size * 3 > free:
        raise CheckpointError(f"Input file '{path}' is {_gib(size)}; converting it needs about {_gib(size * 3)} of "
                              f"memory but only {_gib(free)} is available.", "Free memory or convert on a larger "
                              "machine.")
