"""``porter bench``: latency of a converted model, against torch on the same inputs."""

import click

from porter.bench import BUILD_COMMAND, native_kernels, native_problem, time_fn
from porter.checkpoints import check_input_shapes, parse_input_shapes

from .artifact import load_ported, recorded_model, recorded_source
from .convert import architecture_options
from .errors import InputError, first_line
from .layouts import input_dtypes, order_for_port, recorded_input_shapes
from .ui import common_options


def parse_batches(text):
    try:
        batches = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        batches = []
    if not batches or any(b <= 0 for b in batches):
        raise InputError(f"--batch '{text}' is not a comma-separated list of positive integers.",
                         "Give batch sizes like --batch 1,8.")
    return batches


@click.command(short_help="MLX latency against torch (median after warm-up).")
@click.argument("directory", metavar="DIR")
@click.option("--against", metavar="FILE", help="Also time the torch checkpoint FILE on the same inputs.")
@click.option("--batch", "batch", default="1,8", show_default=True, help="Batch sizes, comma-separated.")
@click.option("--warmup", type=click.IntRange(0, 10000), default=3, show_default=True, help="Untimed runs before timing.")
@click.option("--repeat", type=click.IntRange(1, 100000), default=10, show_default=True, help="Timed runs (the median is reported).")
@click.option("--allow-pure-mlx", is_flag=True,
              help="Time the model even when Porter's native CPU kernels for the current sources are not built (its "
                   "layers then run slower pure-MLX ops; noted, and recorded as \"native\" in --json).")
@architecture_options
@common_options()
def bench(ui, directory, against, batch, warmup, repeat, allow_pure_mlx, model_spec, model_kwargs, arch,
          input_shapes, trust_pickle):
    """Time the converted model in DIR (median of repeated runs after warm-up), and torch with --against.

    Inputs are seeded random tensors of the shape recorded at conversion (or --input-shape), with the batch
    dimension replaced by each --batch size. The ratio is MLX time / torch time (below 1: MLX is faster). On the
    CPU the native kernels must be built for the installed sources (`porter build-kernels`), or --allow-pure-mlx
    given: a timing of the pure-MLX fallback is not what a user with the build runs.
    """
    import mlx.core as mx
    import numpy as np

    from .layouts import torch_to_ported

    batches = parse_batches(batch)
    unused = [name for name, value in (("--model", model_spec), ("--arch", arch), ("--model-kwargs", model_kwargs),
                                       ("--trust-pickle", trust_pickle)) if value]
    if unused and not against:
        raise InputError(f"{', '.join(unused)} given without --against: they describe the torch checkpoint to time "
                         "against.", "Add --against FILE, or drop them.")
    if warmup < 0 or repeat < 1:
        raise InputError("--warmup must be >= 0 and --repeat >= 1.", "For example --warmup 3 --repeat 10.")
    native = native_kernels()
    problem = native_problem(native)
    if problem and not allow_pure_mlx:
        raise InputError(f"Refusing to time '{directory}': {problem}",
                         f"Run `{BUILD_COMMAND}`, or pass --allow-pure-mlx to time the pure-MLX layers on purpose.")
    if problem:
        ui.info(f"Warning: {problem} --allow-pure-mlx: timing the pure-MLX layers.")
    ported = load_ported(directory, ui)
    meta = recorded_source(ported)
    dtypes = input_dtypes(ported)
    shapes = (order_for_port(ported, parse_input_shapes(input_shapes)) if input_shapes else  # the port's order
              parse_input_shapes(recorded_input_shapes(ported, meta), f"input shape recorded in {directory}"))
    check_input_shapes([(b,) + tuple(s[1:]) for b in batches for s in shapes], "--batch with the input shape")
    if not shapes:
        raise InputError(f"'{directory}' does not record its input shape.",
                         "Give it with --input-shape, e.g. --input-shape 1,3,224,224 (torch layout).")
    torch_model = None
    if against:
        from porter.checkpoints import open_model

        if not (model_spec or arch) and meta.get("model"):
            model_spec = recorded_model(directory, against, meta, "bench")
        source = open_model(against, model=model_spec, model_kwargs=model_kwargs, arch=arch,
                            trust_pickle=trust_pickle, input_shapes=shapes,
                            shapes_from="recorded in DIR" if not input_shapes else "from --input-shape")
        torch_model = source.torch_module()
    layouts = list(getattr(ported, "input_layouts", None) or [])
    rng = np.random.default_rng(0)
    rows = []
    with ui.progress([f"batch {b}" for b in batches]) as progress:
        for b in batches:
            with progress.step(f"batch {b}"):
                arrays = [_array(rng, (b,) + tuple(s[1:]), dtypes[i] if i < len(dtypes) else "float32")
                          for i, s in enumerate(shapes)]
                mx_inputs = [mx.array(torch_to_ported(a, layouts[i] if i < len(layouts) else None))
                             for i, a in enumerate(arrays)]

                mx_args, mx_kwargs = ported.split_inputs(mx_inputs)  # keyword inputs by name

                def run_mlx():
                    out = ported(*mx_args, **mx_kwargs)
                    mx.eval(out)

                try:
                    run_mlx()  # a converted graph that cannot run at this size is the input's problem, not a bug
                except (ValueError, TypeError) as exc:
                    raise InputError(f"The converted model in '{directory}' fails at batch {b}: {first_line(exc)}.",
                                     "Check --input-shape/--batch, or convert the model again.")
                row = {"batch": b, "mlx_ms": time_fn(run_mlx, warmup=warmup, repeat=repeat)["median_ms"]}
                if torch_model is not None:
                    import torch

                    t_args, t_kwargs = ported.split_inputs([torch.from_numpy(a) for a in arrays])

                    def run_torch():
                        with torch.inference_mode():
                            torch_model(*t_args, **t_kwargs)

                    row["torch_ms"] = time_fn(run_torch, warmup=warmup, repeat=repeat)["median_ms"]
                    row["ratio"] = row["mlx_ms"] / row["torch_ms"]
                rows.append(row)
    ui.echo(f"{directory}: median of {repeat} runs after {warmup} warm-up runs"
            + (" (PURE MLX: no native kernel build)" if problem else ""))
    header = f"{'batch':>6} {'mlx ms':>10}" + (f" {'torch ms':>10} {'mlx/torch':>10}" if torch_model else "")
    ui.echo(header)
    for row in rows:
        line = f"{row['batch']:>6} {row['mlx_ms']:>10.2f}"
        if "torch_ms" in row:
            line += f" {row['torch_ms']:>10.2f} {row['ratio']:>9.2f}x"
        ui.echo(line)
    ui.emit_json({"ok": True, "directory": directory, "warmup": warmup, "repeat": repeat, "native": native,
                  "results": rows})


def _array(rng, shape, dtype: str):
    """A timing input of the recorded dtype: standard-normal floats; zeros for integer and bool inputs (token ids,
    indices: 0 is valid for any table)."""
    import numpy as np

    if dtype in ("float64",):
        return rng.standard_normal(shape)
    if dtype in ("bool", "uint8", "int8", "int16", "int32", "int64"):
        return np.zeros(shape, dtype=np.bool_ if dtype == "bool" else np.dtype(dtype))
    return rng.standard_normal(shape).astype(np.float32)
