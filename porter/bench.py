"""Forward-pass and training-step timing of a model in torch and in MLX through Porter, each in its own process,
and a per-op time attribution of the MLX side.

Each framework runs in a fresh interpreter (one framework's threads, caches and allocator state never touch the
other's timings): :func:`benchmark_isolated` starts ``python -m porter.bench`` with a JSON spec and reads one JSON
line back. The model is named by importable specs (``"package.module:function"``) so the child can build it.

Example::

    from porter.bench import benchmark_isolated
    spec = dict(builder="porter.examples:resnet18", shape=[8, 3, 224, 224], repeat=20)
    torch_row = benchmark_isolated(dict(spec, framework="torch"))
    mlx_row = benchmark_isolated(dict(spec, framework="mlx"))
    print(mlx_row["median_ms"] / torch_row["median_ms"])

A converted model is measured the way a user runs it: :func:`run_convert` converts and saves it once in a process
that holds torch, and each timed MLX process (:func:`run_loaded`) only loads the artifact and runs it, without
torch (checked), against torch's output saved by the converter. Nothing here imports torch at module level.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Callable


def time_fn(fn: Callable[[], object], *, warmup: int = 3, repeat: int = 20, max_seconds: float | None = None) -> dict:
    """Wall times of ``fn()`` (which must block until its result is ready) after ``warmup`` untimed calls.

    Returns a dict with ``median_ms``, ``p10_ms``, ``p90_ms``, ``min_ms`` and all ``times_ms`` (wall clock), and
    ``cpu_median_ms``: CPU time of the whole process (all threads) per call. On a loaded machine, CPU time of a
    single-threaded run is the steadier measure of work; wall clock is what a user waits. ``max_seconds`` stops the
    timed calls once they have taken that long (at least one is always timed).
    """
    for _ in range(warmup):
        fn()
    times, cpu_times = [], []
    for _ in range(repeat):
        start, cpu_start = time.perf_counter(), time.process_time()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
        cpu_times.append((time.process_time() - cpu_start) * 1e3)
        if max_seconds is not None and sum(times) >= max_seconds * 1e3:
            break
    ordered = sorted(times)
    return {
        "cpu_median_ms": statistics.median(cpu_times),
        "median_ms": statistics.median(times),
        "p10_ms": ordered[int(0.1 * (len(ordered) - 1))],
        "p90_ms": ordered[int(0.9 * (len(ordered) - 1) + 0.5)],
        "min_ms": ordered[0],
        "times_ms": times,
    }


def rss_bytes() -> int:
    """This process's resident set size now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (``ru_maxrss``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


BUILD_COMMAND = "porter build-kernels"


def native_kernels() -> dict:
    """Whether this process's layers run Porter's native CPU kernels: ``{"needed", "available", "directory",
    "reason"}``. ``needed``: the default device is the CPU and neither ``PORTER_NATIVE=0`` nor ``use_native(False)``
    switched them off (an explicit choice to time pure MLX); ``directory``: where the build for the current
    ``layers/csrc`` sources, MLX and CPU must be (``layers/_native_build.py``: an edited source is a new folder, so a
    stale build is a missing one)."""
    import mlx.core as mx

    from porter.layers import native_status

    info = native_status()
    return dict(needed=bool(info["enabled"]) and mx.default_device() == mx.cpu, available=bool(info["available"]),
                directory=info["directory"], reason=info["reason"])


def native_problem(state: dict) -> str | None:
    """The sentence saying why a timing with ``state`` (:func:`native_kernels`) would not time what users run (the
    layers would fall back to pure-MLX ops), or ``None`` when the native kernels are there or not wanted."""
    if not state.get("needed") or state.get("available"):
        return None
    return (f"Porter's native CPU kernels are not built for the current sources ({state.get('reason')}; expected in "
            f"{state.get('directory')}): the layers would silently run on slower pure-MLX ops. Build them with "
            f"`{BUILD_COMMAND}` (again after any layers/csrc edit).")


def load_spec(spec: str):
    """``"package.module:attribute"`` -> the attribute."""
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ValueError(f"[porter.bench] expected 'module:function' but got {spec!r}.")
    return getattr(importlib.import_module(module), attr)


def _torch_model(spec: dict):
    import torch

    torch.manual_seed(spec.get("seed", 0))
    model = load_spec(spec["builder"])(**spec.get("builder_kwargs", {})).eval()
    # BatchNorm statistics away from (0, 1) so a wrong normalisation shows in the sanity check.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return model


def _input(spec: dict):
    import numpy as np

    return np.random.default_rng(spec.get("seed", 0)).standard_normal(spec["shape"]).astype(np.float32)


def run_torch(spec: dict) -> dict:
    """Time a torch model's forward in this process (``torch.no_grad``, ``spec["threads"]`` or all cores)."""
    import torch

    torch.set_num_threads(spec.get("threads") or len(os.sched_getaffinity(0)))
    model = _torch_model(spec)
    x = torch.from_numpy(_input(spec))
    base = rss_bytes()
    if spec.get("mode") == "train":
        timing = time_fn(_train_step_torch(model, x), **_timing_args(spec))
    else:
        with torch.no_grad():
            timing = time_fn(lambda: model(x), **_timing_args(spec))
    return dict(timing, framework="torch", mode=spec.get("mode", "forward"), torch=torch.__version__,
                threads=torch.get_num_threads(), peak_rss_mb=peak_rss_bytes() / 2**20, rss_before_mb=base / 2**20,
                train_params=sum(p.numel() for p in model.parameters() if p.requires_grad))


def run_mlx(spec: dict) -> dict:
    """Convert the torch model with ``spec["converter"]`` (``"module:function"``, ``fn(torch_model, x_nchw)`` ->
    callable on NHWC ``mx.array``; default :func:`porter.convert`) and time its forward in this process. Checks the
    output against torch once (untimed) and reports the largest error relative to the output's magnitude. This
    process holds torch too (``torch_free`` is False): :func:`run_convert` + :func:`run_loaded` measure a port the way
    a user runs it."""
    import porter  # first: picks the BLAS before mlx.core is imported

    import mlx.core as mx
    import numpy as np
    import torch

    native = _check_native(spec)
    model = _torch_model(spec)
    x = _input(spec)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        ref = _first(model(xt)).numpy()
    convert = load_spec(spec["converter"]) if spec.get("converter") else _porter_convert
    forward = convert(model, xt)
    if spec.get("compile"):
        forward = mx.compile(forward)
    # images and videos channels-last ((N, C, H, W) -> (N, H, W, C), (N, C, T, H, W) -> (N, T, H, W, C))
    xm = mx.array(np.ascontiguousarray(np.moveaxis(x, 1, -1)) if x.ndim in (4, 5) else x)
    out = np.array(_first(forward(xm)))
    if out.ndim in (4, 5) and out.shape != ref.shape:
        out = np.moveaxis(out, -1, 1)
    rel_err = _rel_err(out, ref)
    mx.reset_peak_memory()
    base = rss_bytes()
    timing = _time_mlx(forward, xm, spec)
    profile = op_profile(forward, xm) if spec.get("profile") and hasattr(forward, "_program") else None
    return dict(timing, **_mlx_info(), framework="mlx", mode=spec.get("mode", "forward"), profile=profile,
                mlx_peak_mb=mx.get_peak_memory() / 2**20, peak_rss_mb=peak_rss_bytes() / 2**20,
                rss_before_mb=base / 2**20, max_rel_err=rel_err, torch_free=False, native=native,
                path=(spec.get("converter") or "porter.convert") + (" + mx.compile" if spec.get("compile") else ""))


def run_convert(spec: dict) -> dict:
    """The converter process: build the torch model, save torch's output for every batch in ``spec["batches"]``
    (``ref_b{batch}.npy``, torch layout, the first output of a dict or tuple), convert it with :func:`porter.convert`
    at the first batch and :func:`porter.save` it under ``spec["out"]`` (again per batch when the capture did not
    keep the batch dynamic). Returns ``{"artifacts": {batch: folder}, "refs": {batch: npy}, ...}``; the folders are
    what :func:`run_loaded` loads in a torch-free process."""
    import porter  # first: picks the BLAS before mlx.core is imported

    import numpy as np
    import torch

    out_dir = spec["out"]
    os.makedirs(out_dir, exist_ok=True)
    model = _torch_model(spec)
    batches = [int(b) for b in spec["batches"]]
    refs, inputs = {}, {}
    for b in batches:
        inputs[b] = torch.from_numpy(_input(dict(spec, shape=[b, *spec["chw"]])))
        with torch.no_grad():
            refs[b] = os.path.join(out_dir, f"ref_b{b}.npy")
            np.save(refs[b], _first(model(inputs[b])).numpy())
    artifacts, convert_s, save_s = {}, 0.0, 0.0
    for b in batches:
        if b in artifacts:
            continue
        start = time.perf_counter()
        ported = porter.convert(model, inputs[b])
        convert_s += time.perf_counter() - start
        folder = os.path.join(out_dir, f"port_b{b}")
        start = time.perf_counter()
        porter.save(ported, folder)
        save_s += time.perf_counter() - start
        dynamic_batch = any(d["input"] == 0 and d["axis"] == 0 for d in ported.dynamic_dims)
        for other in batches:
            if other == b or (dynamic_batch and other not in artifacts):
                artifacts[other] = folder
        del ported
    size = sum(os.path.getsize(os.path.join(d, f)) for d in set(artifacts.values()) for f in os.listdir(d)
               if f.endswith(".safetensors"))
    return dict(framework="convert", artifacts={str(b): d for b, d in artifacts.items()},
                refs={str(b): r for b, r in refs.items()}, convert_s=convert_s, save_s=save_s,
                artifact_mb=size / 2**20, peak_rss_mb=peak_rss_bytes() / 2**20,
                train_params=sum(p.numel() for p in model.parameters() if p.requires_grad))


def run_loaded(spec: dict) -> dict:
    """The torch-free MLX process: :func:`porter.load` the artifact ``spec["artifact"]`` (saved by
    :func:`run_convert`), run it on the seeded input, compare with torch's output ``spec["ref"]`` (npy), time the
    forward (or the training step), and check that torch was never imported (``torch_free``; raises otherwise).
    ``peak_rss_mb`` is this process's peak: interpreter, MLX, the loaded weights and the runs, no torch."""
    import porter  # first: picks the BLAS before mlx.core is imported

    import mlx.core as mx
    import numpy as np

    from porter.converters import layout

    native = _check_native(spec)
    start = time.perf_counter()
    model = porter.load(spec["artifact"])
    load_s = time.perf_counter() - start
    x = _input(spec)
    in_perm = model.graph["inputs"][0]["perm"]
    xm = mx.array(np.ascontiguousarray(np.transpose(x, in_perm)) if in_perm is not None else x)
    if spec.get("compile"):
        forward = mx.compile(model)
    else:
        forward = model
    out = np.array(_first(forward(xm)))
    out_perm = model.graph["outputs"][0]["perm"]
    if out_perm is not None:
        out = np.transpose(out, layout.to_layout_axes(tuple(out_perm), layout.identity(len(out_perm))))
    ref = np.load(spec["ref"])
    if out.shape != ref.shape:
        raise RuntimeError(f"[porter.bench] the loaded port's output has shape {out.shape}, torch's {ref.shape}")
    rel_err = _rel_err(out, ref)
    base = rss_bytes()
    timing = _time_mlx(model, xm, spec)
    profile = op_profile(model, xm) if spec.get("profile") else None
    if "torch" in sys.modules:
        raise RuntimeError("[porter.bench] the loaded-port process imported torch; it must run without it")
    from mlx.utils import tree_flatten

    train_params = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
    return dict(timing, **_mlx_info(), framework="mlx", mode=spec.get("mode", "forward"), profile=profile,
                mlx_peak_mb=mx.get_peak_memory() / 2**20, peak_rss_mb=peak_rss_bytes() / 2**20,
                rss_before_mb=base / 2**20, max_rel_err=rel_err, torch_free="torch" not in sys.modules,
                native=native, load_s=load_s, train_params=train_params,
                path="porter.load" + (" + mx.compile" if spec.get("compile") else ""))


def _check_native(spec: dict) -> dict:
    """:func:`native_kernels` in an MLX worker; with ``spec["require_native"]`` a missing or stale build is an error
    (the row would time pure-MLX layers), otherwise the state goes into the row for the caller to show."""
    state = native_kernels()
    problem = native_problem(state)
    if problem and spec.get("require_native"):
        raise RuntimeError(f"[porter.bench] {problem}")
    return state


def _time_mlx(forward, xm, spec: dict) -> dict:
    import mlx.core as mx

    if spec.get("mode") == "train":
        return time_fn(_train_step_mlx(forward, xm), **_timing_args(spec))
    return time_fn(lambda: mx.eval(forward(xm)), **_timing_args(spec))


def _timing_args(spec: dict) -> dict:
    return dict(warmup=spec.get("warmup", 3), repeat=spec.get("repeat", 20), max_seconds=spec.get("max_seconds"))


def _mlx_info() -> dict:
    import porter

    info = porter.runtime_info()
    return dict(mlx=info["mlx"], blas=info["blas"]["config"] or info["blas"]["source"],
                blas_library=info["blas"]["library"], threads=info["blas"]["threads"], cache_limit=info["cache_limit"])


def _first(out):
    """The first output of a model that returns a dict (segmentation: ``"out"``), tuple or list."""
    while isinstance(out, (dict, tuple, list)):
        out = next(iter(out.values())) if isinstance(out, dict) else out[0]
    return out


def _rel_err(out, ref) -> float:
    import numpy as np

    return float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-12))


def _train_step_torch(model, x, lr=1e-3):
    """Forward, backward (sum of squares of the output) and an SGD update, as a torch user would write it."""
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=lr)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = _first(model(x)).square().mean()
        loss.backward()
        opt.step()
        return loss

    return step


def _train_step_mlx(forward, x, lr=1e-3):
    """The same step on the converted model: ``nn.value_and_grad`` and ``mlx.optimizers.SGD``."""
    import mlx.core as mx
    import mlx.nn as mnn
    import mlx.optimizers as optim

    opt = optim.SGD(learning_rate=lr)
    loss_and_grad = mnn.value_and_grad(forward, lambda a: _first(forward(a)).square().mean())

    def step():
        loss, grads = loss_and_grad(x)
        opt.update(forward, grads)
        mx.eval(loss, forward.parameters(), opt.state)
        return loss

    return step


def op_profile(ported, x, repeat: int = 3) -> list:
    """Per-op time attribution of a converted model's forward: each graph node run and evaluated on its own
    (inputs evaluated first), ``repeat`` times; returns ``[(op, total ms, share)]`` summed by op kind, largest first.
    Per-node evaluation adds MLX's fixed cost per eval (~0.02-0.07 ms) to every node, so small ops look bigger than
    they are inside one graph; the ranking of the large ones is what this is for."""
    import time

    import mlx.core as mx

    program = ported._program
    totals: dict = {}
    for _ in range(repeat):
        env = {spec["name"]: value for spec, value in zip(program.graph["inputs"], (x,))}
        for node, fn in zip(program.graph["nodes"], program.kernels):
            args = [ported._resolve(spec, env) for spec in node["inputs"]]
            mx.eval([a for a in args if isinstance(a, mx.array)])
            start = time.perf_counter()
            if fn is None:  # a layer of the module tree (call_module): named by its class, activations by function
                from porter.converters.tree import resolve

                layer = resolve(ported, program.layer_keys[node["attrs"]["module"]])
                start = time.perf_counter()
                out = layer(*args)
                fn_name = getattr(layer, "fn", None)
                key = f"unary:{fn_name}" if isinstance(fn_name, str) else type(layer).__name__.lower()
            else:
                out = fn(*args, **node["attrs"])
                key = node["kernel"] + (f":{node['attrs']['fn']}" if "fn" in node["attrs"] else "")
            mx.eval(out)
            totals[key] = totals.get(key, 0.0) + (time.perf_counter() - start) * 1e3 / repeat
            env[node["outputs"][0]] = out
    total = sum(totals.values()) or 1.0
    return sorted(((k, v, v / total) for k, v in totals.items()), key=lambda r: -r[1])


def _porter_convert(model, x):
    import porter

    return porter.convert(model, x)


def benchmark_isolated(spec: dict, *, env: dict | None = None, timeout: float = 900) -> dict:
    """Run ``spec`` in a fresh interpreter and return its result dict. ``framework`` picks the worker: "torch"
    (:func:`run_torch`), "mlx" (convert and run in one process, :func:`run_mlx`), "convert" (:func:`run_convert`:
    ``chw``, ``batches``, ``out``) or "loaded" (:func:`run_loaded`: ``artifact``, ``ref``; no torch). The rest:
    ``builder``, ``shape``, optional ``builder_kwargs``, ``converter``, ``repeat``, ``warmup``, ``seed``,
    ``threads``, ``compile``, ``mode`` "forward" or "train" (forward, backward of the mean squared output, SGD
    update), ``profile`` (MLX: per-op attribution, :func:`op_profile`), ``require_native`` (MLX: fail rather than
    time pure-MLX layers when the native kernels for the current sources are not built; every MLX row records
    ``native``, :func:`native_kernels`). "native" returns the child's :func:`native_kernels` (a check before a run).

    ``env`` adds environment variables for the child (e.g. ``{"PORTER_BLAS": "none"}``). A torch child gets
    ``PORTER_BLAS=none`` and ``PORTER_CACHE_LIMIT=mlx`` unless ``env`` sets them: then nothing but torch's own BLAS
    is loaded in it, and glibc's allocator keeps its own policy (the worker imports ``porter.bench``, and Porter's
    CPU default otherwise tunes glibc for the whole process, which makes torch's large allocations faster than in a
    torch process as users run it: the baseline would move).
    """
    child_env = dict(os.environ)
    if spec.get("framework") == "torch":
        child_env["PORTER_BLAS"] = "none"  # torch's own BLAS only, unless env says otherwise
        child_env["PORTER_CACHE_LIMIT"] = "mlx"  # torch's own allocator policy (glibc untouched)
    child_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "porter.bench", json.dumps(spec)], capture_output=True, text=True,
                          env=child_env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"[porter.bench] the {spec.get('framework')} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def benchmark_model(builder: str, shape, *, converter: str | None = None, repeat: int = 20, warmup: int = 3,
                    env: dict | None = None) -> dict:
    """Torch and MLX (through Porter) forward times of one model at one input shape, each in its own process.

    Returns ``{"torch": row, "mlx": row, "ratio": mlx_median / torch_median}``.
    """
    spec = dict(builder=builder, shape=list(shape), converter=converter, repeat=repeat, warmup=warmup)
    torch_row = benchmark_isolated(dict(spec, framework="torch"))
    mlx_row = benchmark_isolated(dict(spec, framework="mlx"), env=env)
    return {"torch": torch_row, "mlx": mlx_row, "ratio": mlx_row["median_ms"] / torch_row["median_ms"]}


SWITCHES_ENV = "PORTER_BENCH_SWITCHES"


def apply_switches(text: str) -> dict:
    """Set Porter's A/B switches named in ``text`` (``"module:ATTR=0|1,..."``, e.g.
    ``porter.converters.static_values:ENABLED=0``: a worker's ``$PORTER_BENCH_SWITCHES``, so ``benchmarks/models.py
    --env PORTER_BENCH_SWITCHES=...`` times the old path in its own processes). Only existing bool attributes of
    ``porter.*`` modules; returns ``{"module:ATTR": value}``."""
    done = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        target, _, value = item.partition("=")
        module_name, _, attr = target.partition(":")
        if not module_name.startswith("porter.") or value not in ("0", "1") or not attr:
            raise ValueError(f"{SWITCHES_ENV}: expected 'porter.module:ATTR=0|1' but got {item!r}")
        module = importlib.import_module(module_name)
        if not isinstance(getattr(module, attr, None), bool):
            raise ValueError(f"{SWITCHES_ENV}: {target!r} is not a bool switch")
        setattr(module, attr, value == "1")
        done[target] = value == "1"
    return done


def _main(argv: list[str]) -> None:
    spec = json.loads(argv[0])
    for path in spec.get("sys_path", []):
        sys.path.insert(0, path)
    if os.environ.get(SWITCHES_ENV):
        apply_switches(os.environ[SWITCHES_ENV])
    runner = {"torch": run_torch, "mlx": run_mlx, "convert": run_convert, "loaded": run_loaded,
              "native": lambda _spec: native_kernels()}[spec["framework"]]
    print(json.dumps(runner(spec)))


if __name__ == "__main__":
    _main(sys.argv[1:])
