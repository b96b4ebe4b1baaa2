"""Two registries, both filled by decorators in the op-family files (``converters/ops/*.py``).

* converters, keyed by the captured op ("aten.conv2d.default", "operator.getitem"): conversion-time functions
  that choose layouts, transform weights and emit runtime nodes;
* kernels, keyed by a runtime kernel name ("conv", "max_pool"): the MLX functions a converted graph runs.

A duplicate registration raises; a lookup miss raises ``NotImplementedError`` naming the op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

_CONVERTERS: dict = {}
_KERNELS: dict = {}
_SPECS: dict = {}
_TRAINING: set = set()  # kernels that take the mode of their node's module: ``training=`` (runtime.py)


class UnsupportedOpsError(NotImplementedError):
    """Raised when a model uses ops Porter cannot convert; ``.ops`` lists every one of them at once.

    Each entry of ``.ops`` is an op name; ``.locations`` maps each op name to the module paths where it occurs.
    """

    def __init__(self, locations: dict):
        self.locations = {op: sorted(set(paths)) for op, paths in locations.items()}
        self.ops = sorted(self.locations)
        lines = [
            f"  {op}  (in {', '.join(repr(p) if p else '<root>' for p in self.locations[op])}){_why(op)}"
            for op in self.ops
        ]
        super().__init__(
            f"Porter cannot convert {len(self.ops)} op(s) used by this model:\n" + "\n".join(lines)
        )


_RANDOM = ("rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "normal", "bernoulli",
           "multinomial", "uniform", "exponential", "poisson", "randperm", "native_dropout")
_DATA_SIZED = ("nonzero", "nonzero_static", "masked_select", "unique", "_unique", "_unique2", "unique_dim",
               "unique_consecutive", "bincount", "argwhere", "repeat_interleave", "histc", "_ctc_loss")
_COMPLEX = ("istft", "_fft_c2c_backward", "_fft_r2c_backward", "view_as_real_copy", "view_as_complex_copy")


def _why(op: str) -> str:
    """A hint for whole families Porter refuses on purpose or does not have yet."""
    base = op.split(".")[1] if op.count(".") >= 1 else op
    if base.rstrip("_") in _RANDOM:
        return ("  -- random sampling in the forward: a port cannot give torch's numbers for it; sample outside "
                "the converted forward (e.g. pass the noise in as an input), or convert in eval mode")
    if base in _DATA_SIZED:
        return ("  -- its output's size depends on the tensor's values, which a converted graph cannot express; "
                "keep it outside the converted forward (mask with torch.where, or index with sizes known up front)")
    if base in _COMPLEX:
        return "  -- this complex-valued op is not supported yet"
    return ""


@dataclass(frozen=True)
class ConverterEntry:
    fn: Callable
    # True when the op computes in channels-last (conv, pool, norm): a graph input read by it is taken
    # channels-last under io_layout="mlx".
    channels_last: bool


def register(*ops: str, channels_last: bool = False):
    """Register the decorated function as the converter of every op in ``ops``."""

    def decorate(fn):
        for op in ops:
            if op in _CONVERTERS:
                raise ValueError(f"duplicate converter for op {op!r}: {_CONVERTERS[op].fn.__name__} and {fn.__name__}")
            _CONVERTERS[op] = ConverterEntry(fn, channels_last)
        return fn

    return decorate


def register_same(op: str, as_op: str) -> bool:
    """Register ``as_op``'s converter for ``op`` too (an op computing the same values, e.g. ``view_copy`` for
    ``view``); False, registering nothing, when ``as_op`` has no converter."""
    if as_op not in _CONVERTERS:
        return False
    register(op, channels_last=_CONVERTERS[as_op].channels_last)(_CONVERTERS[as_op].fn)
    return True


def kernel(name: str, *, inputs=None, attrs=None, more=None, check=None, training: bool = False):
    """Register the decorated function as the runtime kernel ``name``, with the spec of its arguments.

    ``inputs``: one spec (``converters/spec.py``) per positional parameter; ``more``: the spec of each extra
    positional input of a ``*args`` kernel; ``attrs``: spec per keyword parameter; ``check``: a cross-field rule on
    the attrs. A loaded artifact is checked against them before anything runs; a kernel registered without a spec
    cannot be loaded from a file (``tests/converters/test_kernel_specs.py`` fails for it). ``training``: the
    runtime also passes ``training=`` (whether the node's torch module, or its nearest holder in the tree, is in
    training mode; never read from the file): the random training-mode kernels (functional dropout).
    """

    def decorate(fn):
        if name in _KERNELS:
            raise ValueError(f"duplicate kernel {name!r}: {_KERNELS[name].__name__} and {fn.__name__}")
        _KERNELS[name] = fn
        if training:
            _TRAINING.add(name)
        if (inputs, attrs, more, check) != (None, None, None, None):
            from .spec import KernelSpec

            _SPECS[name] = KernelSpec(inputs or (), attrs, more, check)
        return fn

    return decorate


def _load_families() -> None:
    from . import ops  # noqa: F401  (importing the package registers every family)


def has_converter(op: str) -> bool:
    _load_families()
    return op in _CONVERTERS


def get_converter(op: str) -> ConverterEntry:
    _load_families()
    try:
        return _CONVERTERS[op]
    except KeyError:
        raise NotImplementedError(f"Porter has no converter for op {op!r}") from None


def get_kernel(name: str) -> Callable:
    _load_families()
    try:
        return _KERNELS[name]
    except KeyError:
        raise NotImplementedError(f"Porter has no runtime kernel {name!r}") from None


def takes_training(name: str) -> bool:
    """Whether kernel ``name`` takes the ``training=`` mode of its node's module (registered ``training=True``)."""
    _load_families()
    return name in _TRAINING


def get_kernel_spec(name: str):
    """The :class:`~converters.spec.KernelSpec` of kernel ``name``, or None when it was registered without one."""
    _load_families()
    return _SPECS.get(name)


def kernel_names() -> list:
    _load_families()
    return sorted(_KERNELS)


def supported_ops() -> list:
    _load_families()
    return sorted(_CONVERTERS)
