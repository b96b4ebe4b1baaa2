"""The inputs ``porter.validate`` runs both models on by default: seeded random tensors shaped like the conversion
example (from the port's recorded graph or the example itself) and, when the torch model and the port's input
checks accept one, a second size (another batch, odd and larger spatial sizes)."""

from __future__ import annotations

from typing import List, Tuple

from porter.compare import split_call


def _example_specs(ported, example_inputs) -> List[Tuple[Tuple[int, ...], str]]:
    """(shape, dtype name) of each example input, from ``example_inputs`` or the port's recorded graph."""
    if example_inputs is not None:
        import torch

        items = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
        return [(tuple(t.shape), str(t.dtype).replace("torch.", "")) for t in items]
    graph = getattr(ported, "graph", None)
    specs = []
    if isinstance(graph, dict) and graph.get("inputs"):
        for entry in graph["inputs"]:
            meta = entry.get("meta", {})
            if meta.get("kind") != "tensor":
                raise ValueError("[validate] the port takes a non-tensor input; pass 'inputs' explicitly.")
            # Symbolic dims are recorded as names with the example's value as "hint".
            hint = meta.get("hint", meta.get("shape", []))
            specs.append((tuple(int(h) for h in hint), str(meta.get("dtype", "float32"))))
        return specs
    raise ValueError("[validate] cannot tell the example input shapes of this port; pass 'inputs' "
                     "(a list of input tuples in torch layout) or 'example_inputs'.")


def _random_inputs(specs, shapes, seed: int):
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for (_, dtype), shape in zip(specs, shapes):
        # a dtype name recorded in a graph: looked up in a fixed table, never getattr on torch with a file's name
        tdtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64, "bool": torch.bool,
                  "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
                  "int64": torch.int64}.get(dtype, torch.float32)
        if tdtype.is_floating_point:
            out.append(torch.randn(shape, generator=gen).to(tdtype))
        elif tdtype == torch.bool:
            out.append(torch.randint(0, 2, shape, generator=gen).bool())
        else:
            out.append(torch.randint(0, 2, shape, generator=gen).to(tdtype))  # ids 0/1 are valid for any table
    return tuple(out)


def _second_size_candidates(specs) -> List[List[Tuple[int, ...]]]:
    """Other input sizes to try, most informative first: odd and larger spatial sizes with another batch size,
    then sizes friendly to divisibility constraints, then batch only."""
    def varied(shape, spatial_fn):
        dims = list(shape)
        if dims:
            dims[0] = 1 if dims[0] > 1 else 2
        # Spatial dims (2 onwards) are varied even when the export was static: a port must not bake in the
        # example's size, and the torch model itself decides which sizes are allowed.
        for i in range(2, len(dims)):
            dims[i] = spatial_fn(dims[i])
        return tuple(dims)

    rules = [
        lambda s: s + max(1, s // 4) + (1 - (s + max(1, s // 4)) % 2),  # ~1.25x, odd
        lambda s: s + max(1, s // 4),
        lambda s: s + 8 * max(1, s // 16),  # keeps divisibility by 8
        lambda s: 2 * s,
    ]
    candidates = []
    for rule in rules:
        candidates.append([varied(shape, rule) for shape, _ in specs])
    candidates.append([varied(shape, lambda s: s) for shape, _ in specs])  # batch only
    seen, unique = set(), []
    for c in candidates:
        key = tuple(c)
        if key not in seen and key != tuple(shape for shape, _ in specs):
            seen.add(key)
            unique.append(c)
    return unique


def default_input_sets(model, ported, example_inputs, seed: int):
    """Seeded inputs at the example size and, when the torch model accepts one, a second size."""
    import torch

    specs = _example_specs(ported, example_inputs)
    first = _random_inputs(specs, [s for s, _ in specs], seed)
    sets = [first]
    notes = []
    if all(len(s) >= 1 for s, _ in specs):
        for shapes in _second_size_candidates(specs):
            trial = _random_inputs(specs, shapes, seed + 1)
            try:
                with torch.no_grad():
                    args, kwargs = split_call(ported, trial)
                    model(*args, **kwargs)
            except Exception as exc:  # the torch model's own limits decide what is "allowed"
                notes.append(f"torch rejects input shapes {shapes}: {type(exc).__name__}")
                continue
            checks = getattr(ported, "input_checks", None)
            refusal = checks.refusal(shapes) if checks is not None else None
            if refusal:  # the port was built under a shape condition these sizes break: it refuses them
                notes.append(f"the port refuses input shapes {shapes} (its input checks): {refusal.split(':')[0]}")
                continue
            sets.append(trial)
            break
    if len(sets) == 1:
        notes.append("the torch model accepts no second input size tried; validated at the example size only")
    return sets, notes
