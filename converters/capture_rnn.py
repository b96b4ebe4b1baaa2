"""Shape rules for the recurrent ops while ``torch.export`` captures (imports torch; conversion only).

``aten.lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu`` (what nn.LSTM, nn.GRU and nn.RNN call) are composite ops that
export keeps whole, but it works out their output shapes by running the composite on fake tensors: a Python loop
over ``input.unbind(time_dim)``, which fixes the sequence length to the example's (a guard ``T == 40`` the port
then checks on every call). The port's recurrence runs any length (``converters/ops/recurrent.py``), so during a
capture these ops' Python kernels (torch's decompositions, registered for ``CompositeImplicitAutograd`` and
``Autograd``) are wrapped: on fake tensors they state the output shapes directly (layout as in torch: output
``(T, N, D * H_out)``, batch-major with ``batch_first``; final states shaped as the initial ones), with no loop and
no guard; on real tensors, and for inputs of another rank, torch's kernel runs. Torch's kernels are restored when
the capture ends.

Non-strict ``torch.export`` swaps a module's parameters for fake tensors, and ``nn.RNNBase`` rebuilds its
``_flat_weights`` list whenever a weight is set, so every capture of an ``nn.LSTM``/``GRU``/``RNN`` made torch warn
"The tensor attributes self.<path>._flat_weights[0], ... were assigned during export. Such attributes must be
registered as buffers": torch's own bookkeeping (restored after the capture), nothing the user can change. That
warning is silenced during the capture when every attribute it names is an ``_flat_weights`` entry; one naming a
user's own tensor attribute is still shown.
"""

from __future__ import annotations

import contextlib
import warnings

import torch

_OPS = ("lstm", "gru", "rnn_tanh", "rnn_relu")


def _bound(func, args, kwargs) -> dict:
    names = [a.name for a in func._schema.arguments]
    bound = dict(zip(names, args))
    bound.update(kwargs)
    return bound


def _shapes_only(func, original):
    """``func``'s kernel during a capture: on fake tensors the outputs' shapes, stated; on real ones torch's."""
    from torch._subclasses.fake_tensor import is_fake

    def recurrent(*args, **kwargs):
        a = _bound(func, args, kwargs)
        x, hx = a["input"], a["hx"]
        states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
        if not is_fake(x) or x.dim() != 3 or any(h.dim() != 3 for h in states):
            return original(*args, **kwargs)  # torch's own kernel: its values, or its error for a bad rank
        directions = 2 if a["bidirectional"] else 1
        width = directions * states[0].size(2)
        time, batch = (x.size(1), x.size(0)) if a["batch_first"] else (x.size(0), x.size(1))
        output = x.new_empty((batch, time, width) if a["batch_first"] else (time, batch, width))
        return (output, *[h.new_empty(h.shape) for h in states])

    return recurrent


def recurrent_ops() -> list:
    return [getattr(torch.ops.aten, name).input for name in _OPS]


_KEYS = (torch._C.DispatchKey.CompositeImplicitAutograd, torch._C.DispatchKey.Autograd)

# torch's warning (``_functorch/_aot_autograd``) when it names nothing but RNN modules' ``_flat_weights`` entries
_FLAT_WEIGHT = r"self\.(?:\w+\.)*_flat_weights\[\d+\]"
FLAT_WEIGHTS_WARNING = (rf"The tensor attributes? {_FLAT_WEIGHT}(?:, {_FLAT_WEIGHT})* (?:was|were) assigned "
                        r"during export\.")


@contextlib.contextmanager
def symbolic_recurrent_shapes():
    """Give the recurrent ops shape-only kernels on fake tensors for one capture (torch's Python kernels for
    ``CompositeImplicitAutograd``/``Autograd`` restored afterwards)."""
    saved = []
    for op in recurrent_ops():
        for key in _KEYS:
            original = op.py_kernels.get(key)
            if original is None:
                continue
            saved.append((op, key, original))
            op.py_kernels[key] = _shapes_only(op, original)
        op._dispatch_cache.clear()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=FLAT_WEIGHTS_WARNING, category=UserWarning)
            yield
    finally:
        for op, key, original in saved:
            op.py_kernels[key] = original
            op._dispatch_cache.clear()
