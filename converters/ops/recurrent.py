"""Recurrent layers: ATen's lstm / gru / rnn_tanh / rnn_relu (what nn.LSTM, nn.GRU and nn.RNN call), every layer
and direction, biases or none, LSTM's ``proj_size``; and their one-step cells (nn.LSTMCell, GRUCell, RNNCell).

Layout: the sequence is time-major (T, N, I), or batch-major (N, T, I) with ``batch_first`` (an unbatched call was
given a batch of one by the module before the op); states are (layers * directions, N, H). Parameters come in
torch's order (per layer, per direction: ``weight_ih``, ``weight_hh``, [``bias_ih``, ``bias_hh``], [``weight_hr``])
and torch's layouts, so the port's arrays keep nn.LSTM's names and shapes. Gates follow torch's formulas (LSTM
i, f, g, o; GRU r, z, n with ``r * (W_hn h + b_hn)``). The input projection of every time step is one matmul per
layer and direction; the recurrence runs step by step. Dropout between layers exists only in training: a call
recorded with it is refused.
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..registry import kernel, register
from ..spec import TENSOR, Bool, Enum, Int, Seq

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def _linear(x, weight, bias):
    y = x @ weight.T
    return y + bias if bias is not None else y


def _groups(params, mode: str, num_layers: int, directions: int, has_biases: bool):
    """The per-(layer, direction) parameter tuples (w_ih, w_hh, b_ih, b_hh, w_hr) out of torch's flat list."""
    base = 2 + 2 * has_biases
    count = num_layers * directions
    if len(params) == count * base:
        size = base
    elif mode == "lstm" and len(params) == count * (base + 1):
        size = base + 1  # proj_size > 0: weight_hr follows
    else:
        raise ValueError(f"{mode}: {len(params)} parameter tensors do not fit {num_layers} layer(s) x {directions} "
                         f"direction(s) ({base} each{', or one more with proj_size' if mode == 'lstm' else ''})")
    out = []
    for k in range(count):
        group = list(params[k * size:(k + 1) * size])
        w_ih, w_hh = group[0], group[1]
        b_ih, b_hh = (group[2], group[3]) if has_biases else (None, None)
        w_hr = group[-1] if size == base + 1 else None
        out.append((w_ih, w_hh, b_ih, b_hh, w_hr))
    return out


def _check(group, mode: str, width: int, where: str):
    """Shapes of one layer-direction's parameters against the input width (a clear error, not MLX's)."""
    w_ih, w_hh, b_ih, b_hh, w_hr = group
    rows = w_ih.shape[0] if w_ih.ndim == 2 else -1
    gates = GATES[mode]
    if w_ih.ndim != 2 or rows % gates or w_ih.shape[1] != width:
        raise ValueError(f"{mode}: {where}'s weight_ih has shape {tuple(w_ih.shape)}, expected ({gates} * hidden, "
                         f"{width})")
    hidden = rows // gates
    out = w_hr.shape[0] if w_hr is not None else hidden
    if w_hh.shape != (rows, out) or (w_hr is not None and w_hr.shape != (out, hidden)):
        raise ValueError(f"{mode}: {where}'s weight_hh {tuple(w_hh.shape)} / weight_hr do not fit hidden size "
                         f"{hidden}")
    for b in (b_ih, b_hh):
        if b is not None and b.shape != (rows,):
            raise ValueError(f"{mode}: {where}'s bias has shape {tuple(b.shape)}, expected ({rows},)")
    return hidden, out


def _sigmoid(x):
    """MLX 0.32's float64 sigmoid is float32-accurate; its tanh is not: 1/2 (1 + tanh(x/2)) for float64."""
    return 0.5 * (mx.tanh(0.5 * x) + 1) if x.dtype == mx.float64 else mx.sigmoid(x)


def _step(mode, xw, h, c, w_hh, b_hh, w_hr):
    """One time step: the input's projection ``xw`` (N, G * H) and the states -> (h, c)."""
    hw = _linear(h, w_hh, b_hh)
    if mode == "lstm":
        i, f, g, o = mx.split(xw + hw, 4, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * mx.tanh(g)
        h = _sigmoid(o) * mx.tanh(c)
        return (h @ w_hr.T if w_hr is not None else h), c
    if mode == "gru":
        xr, xz, xn = mx.split(xw, 3, axis=-1)
        hr, hz, hn = mx.split(hw, 3, axis=-1)
        r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
        n = mx.tanh(xn + r * hn)
        return (1 - z) * n + z * h, c
    pre = xw + hw
    return (mx.tanh(pre) if mode == "rnn_tanh" else mx.maximum(pre, 0)), c


@kernel("rnn", inputs=[TENSOR, Seq(TENSOR, 1, 2), Seq(TENSOR, 2, 1 << 14)],
        attrs={"mode": Enum(*GATES), "num_layers": Int(1, 1 << 12), "bidirectional": Bool(),
               "batch_first": Bool(), "has_biases": Bool()})
def k_rnn(x, hx, params, *, mode, num_layers, bidirectional, batch_first, has_biases):
    if x.ndim != 3:
        raise ValueError(f"{mode}: expected a 3-d sequence, got shape {tuple(x.shape)}")
    if (mode == "lstm") != (len(hx) == 2):
        raise ValueError(f"{mode}: expected {'(h0, c0)' if mode == 'lstm' else 'one state h0'}, got {len(hx)} states")
    directions = 2 if bidirectional else 1
    seq = mx.swapaxes(x, 0, 1) if batch_first else x  # (T, N, I)
    steps, batch = seq.shape[0], seq.shape[1]
    groups = _groups(params, mode, num_layers, directions, has_biases)
    h_all, c_all = hx[0], hx[1] if mode == "lstm" else None
    h_n, c_n = [], []
    for layer in range(num_layers):
        outputs = []
        for d in range(directions):
            k = layer * directions + d
            w_ih, w_hh, b_ih, b_hh, w_hr = groups[k]
            hidden, out = _check(groups[k], mode, seq.shape[-1], f"layer {layer}{' reverse' if d else ''}")
            if h_all.shape != (num_layers * directions, batch, out):
                raise ValueError(f"{mode}: h0 has shape {tuple(h_all.shape)}, expected "
                                 f"({num_layers * directions}, {batch}, {out})")
            if c_all is not None and c_all.shape != (num_layers * directions, batch, hidden):
                raise ValueError(f"{mode}: c0 has shape {tuple(c_all.shape)}, expected "
                                 f"({num_layers * directions}, {batch}, {hidden})")
            xw = _linear(seq, w_ih, b_ih)  # every step's input projection at once: (T, N, G * H)
            h, c = h_all[k], (c_all[k] if c_all is not None else None)
            ys = [None] * steps
            for t in (range(steps - 1, -1, -1) if d else range(steps)):
                h, c = _step(mode, xw[t], h, c, w_hh, b_hh, w_hr)
                ys[t] = h
            outputs.append(mx.stack(ys) if steps else mx.zeros((0, batch, out), dtype=x.dtype))
            h_n.append(h)
            if c is not None:
                c_n.append(c)
        seq = outputs[0] if directions == 1 else mx.concatenate(outputs, axis=-1)
    y = mx.swapaxes(seq, 0, 1) if batch_first else seq
    return [y, mx.stack(h_n)] + ([mx.stack(c_n)] if mode == "lstm" else [])


@register("aten.lstm.input", "aten.gru.input", "aten.rnn_tanh.input", "aten.rnn_relu.input")
def convert_rnn(ctx, call):
    from ..convert import Info

    mode = call.op.split(".")[1]
    x = call.arg("input")
    hx = call.arg("hx")
    hx = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    num_layers = call.arg("num_layers")
    dropout = call.arg("dropout")
    if call.arg("train") and dropout and num_layers > 1:
        call.fail("dropout", "dropout between recurrent layers in training mode is not supported (convert in eval)")
    ident = L.identity(ctx.meta(x).rank)
    states = [ctx.tensor(h, L.identity(ctx.meta(h).rank)) for h in hx]
    params = [ctx.tensor(p, L.identity(ctx.meta(p).rank)) for p in call.arg("params")]
    ctx.emit("rnn", [ctx.tensor(x, ident), states, params],
             {"mode": mode, "num_layers": num_layers, "bidirectional": call.arg("bidirectional"),
              "batch_first": call.arg("batch_first"), "has_biases": call.arg("has_biases")},
             items=[Info(m, L.identity(m.rank)) for m in call.meta.items])


@kernel("rnn_cell", inputs=[TENSOR, Seq(TENSOR, 1, 2), Seq(TENSOR, 2, 4)],
        attrs={"mode": Enum(*GATES), "has_biases": Bool()})
def k_rnn_cell(x, hx, params, *, mode, has_biases):
    """One step of nn.LSTMCell / GRUCell / RNNCell: ``x`` (N, I), states (N, H) -> ``h``, or ``[h, c]`` (LSTM)."""
    if x.ndim != 2:
        raise ValueError(f"{mode}_cell: expected a 2-d input (N, I), got shape {tuple(x.shape)}")
    if (mode == "lstm") != (len(hx) == 2):
        raise ValueError(f"{mode}_cell: expected {'(h, c)' if mode == 'lstm' else 'one state h'}, got {len(hx)}")
    (group,) = _groups(params, mode, 1, 1, has_biases)
    hidden, _ = _check(group, mode, x.shape[-1], "the cell")
    w_ih, w_hh, b_ih, b_hh, _ = group
    for name, state in zip(("h", "c"), hx):
        if state.shape != (x.shape[0], hidden):
            raise ValueError(f"{mode}_cell: {name} has shape {tuple(state.shape)}, expected ({x.shape[0]}, {hidden})")
    h, c = _step(mode, _linear(x, w_ih, b_ih), hx[0], hx[1] if mode == "lstm" else None, w_hh, b_hh, None)
    return [h, c] if mode == "lstm" else h


@register("aten.lstm_cell.default", "aten.gru_cell.default", "aten.rnn_tanh_cell.default",
          "aten.rnn_relu_cell.default")
def convert_rnn_cell(ctx, call):
    from ..convert import Info

    mode = call.op.split(".")[1][:-len("_cell")]
    x, hx = call.arg("input"), call.arg("hx")
    hx = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    biases = [call.arg(n) for n in ("b_ih", "b_hh")]
    if (biases[0] is None) != (biases[1] is None):
        call.fail("b_ih" if biases[0] is None else "b_hh", "give both biases or neither")
    params = [call.arg("w_ih"), call.arg("w_hh")] + ([] if biases[0] is None else biases)

    def spec(v):
        return ctx.tensor(v, L.identity(ctx.meta(v).rank))

    attrs = {"mode": mode, "has_biases": biases[0] is not None}
    inputs = [spec(x), [spec(h) for h in hx], [spec(p) for p in params]]
    if mode == "lstm":
        return ctx.emit("rnn_cell", inputs, attrs, items=[Info(m, L.identity(m.rank)) for m in call.meta.items])
    ctx.emit("rnn_cell", inputs, attrs, perm=L.identity(call.meta.rank))
