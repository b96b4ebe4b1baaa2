"""Porter's choice of BLAS for MLX (porter/_blas.py) and its runtime defaults (porter/_runtime.py).

The selection logic is tested with fake libraries, fake /proc/cpuinfo and a fake loader; subprocess tests check the
real thing: after `import porter`, MLX's matmul and conv agree with numpy/torch and the BLAS reported is the one MLX
resolves its symbols from.
"""

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from porter import _blas, _runtime
from porter._blas import Candidate

pytestmark = pytest.mark.slow  # subprocesses or long sweeps: `pytest -m "not slow"` skips them

AVX512_FLAGS = frozenset("fpu sse4_2 avx fma avx2 avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16".split())
AVX2_FLAGS = frozenset("fpu sse4_2 avx fma avx2".split())
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fake_lib(path, *, target=None, dynamic=False, openblas=True):
    """A file that looks like an OpenBLAS build for `target` (or DYNAMIC_ARCH) to the static checks."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = b"\x7fELF" + b"\0" * 64
    if openblas:
        data += b"openblas_get_config\0OpenBLAS 0.3.31 NO_AFFINITY "
    if dynamic:
        data += b"DYNAMIC_ARCH\0"
    if target:
        data += b"\0" + target.encode() + b"\0"
    with open(path, "wb") as f:
        f.write(data + b"\0" * 64)
    return str(path)


class FakeLoader:
    """Records what would be loaded; fails for paths in `broken`. A loaded library exports `cblas_sgemm`, under the
    prefix `scipy_` if it is a scipy-openblas file, under a prefix Porter does not know for paths in `prefixed`."""

    def __init__(self, broken=(), prefixed=()):
        self.loaded, self.broken, self.prefixed = [], set(broken), set(prefixed)

    def __call__(self, path):
        if path in self.broken:
            raise OSError(f"{path}: cannot open shared object file")
        self.loaded.append(path)
        lib = type("Lib", (), {})()  # no openblas_* functions: threads/config stay None
        prefix = "other_" if path in self.prefixed else "scipy_" if "libscipy_openblas" in path else ""
        setattr(lib, prefix + "cblas_sgemm", lambda *args: None)
        return lib


# --------------------------------------------------------------------------- CPU flags and library targets


def test_cpu_flags_x86_and_arm(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: EPYC\nflags\t\t: fpu avx2 avx512f\n\nprocessor\t: 1\nflags\t: fpu\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve\n")
    assert _blas.cpu_flags(str(x86)) == {"fpu", "avx2", "avx512f"}
    assert _blas.cpu_flags(str(arm)) == {"fp", "asimd", "sve"}
    assert _blas.cpu_flags(str(tmp_path / "missing")) == frozenset()


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        (dict(target="SKYLAKEX"), "SKYLAKEX"),
        (dict(target="HASWELL"), "HASWELL"),
        (dict(target="NEHALEM"), "NEHALEM"),
        (dict(dynamic=True), "DYNAMIC_ARCH"),
        (dict(), "unknown"),
        (dict(openblas=False, target="SKYLAKEX"), None),
    ],
)
def test_openblas_target(tmp_path, kwargs, expected):
    assert _blas.openblas_target(fake_lib(tmp_path / "lib.so", **kwargs)) == expected


def test_avx512_build_refused_without_avx512f(tmp_path):
    lib = Candidate("cmeel-openblas", fake_lib(tmp_path / "libopenblas.so.0", target="SKYLAKEX"))
    why = _blas.unsafe_reason(lib, AVX2_FLAGS)
    assert why is not None and "SKYLAKEX" in why and "avx512f" in why
    # ... even when named explicitly: the user asked for speed, not for SIGILL.
    assert _blas.unsafe_reason(Candidate("PORTER_BLAS", lib.path), AVX2_FLAGS, explicit=True) is not None
    assert _blas.unsafe_reason(lib, AVX512_FLAGS) is None


def test_real_cmeel_openblas_is_checked_statically():
    """The wheel the fast-cpu extra installs is an AVX-512 build: refused without avx512f, accepted with it."""
    found = [c for c in _blas.find_candidates({}) if c.source == "cmeel-openblas"]
    if not found:
        pytest.skip("cmeel-openblas (the fast-cpu extra) is not installed in this environment")
    assert _blas.openblas_target(found[0].path) == "SKYLAKEX"
    assert "avx512f" in _blas.unsafe_reason(found[0], AVX2_FLAGS)
    assert _blas.unsafe_reason(found[0], AVX512_FLAGS) is None
    bundled = _blas._gfortran_from_mlx()  # a real ELF library that is not OpenBLAS
    assert bundled is not None and _blas.openblas_target(bundled) is None


def test_other_targets(tmp_path):
    haswell = Candidate("system-openblas", fake_lib(tmp_path / "h.so", target="HASWELL"))
    assert "avx2" in _blas.unsafe_reason(haswell, frozenset({"avx"}))
    assert _blas.unsafe_reason(haswell, AVX2_FLAGS) is None
    dynamic = Candidate("system-openblas", fake_lib(tmp_path / "d.so", dynamic=True))
    assert _blas.unsafe_reason(dynamic, frozenset()) is None
    unknown = Candidate("system-openblas", fake_lib(tmp_path / "u.so"))
    assert "does not know" in _blas.unsafe_reason(unknown, AVX512_FLAGS)
    assert _blas.unsafe_reason(unknown, AVX512_FLAGS, explicit=True) is None
    other = Candidate("system-openblas", fake_lib(tmp_path / "blis.so", openblas=False))
    assert _blas.unsafe_reason(other, AVX512_FLAGS) == "not an OpenBLAS library"
    assert _blas.unsafe_reason(other, AVX512_FLAGS, explicit=True) is None
    assert _blas.unsafe_reason(Candidate("mkl", fake_lib(tmp_path / "libmkl_rt.so.2", openblas=False)),
                               frozenset()) is None
    assert _blas.unsafe_reason(Candidate("PORTER_BLAS", str(tmp_path / "nope.so")), AVX512_FLAGS) == "no such file"


# --------------------------------------------------------------------------- candidate order


def make_tree(tmp_path):
    site = tmp_path / "site"
    cmeel = fake_lib(site / "cmeel.prefix/lib/libopenblas.so.0", target="SKYLAKEX")
    scipy = fake_lib(site / "scipy_openblas32/lib/libscipy_openblas.so", dynamic=True)
    root = tmp_path / "root"
    lib_dir = root / f"usr/lib/{_blas._multiarch()}"
    pthread = fake_lib(lib_dir / "openblas-pthread/libopenblas.so.0", dynamic=True)
    os.symlink(pthread, lib_dir / "libopenblas.so.0")  # Debian's alternatives link: the same library, listed once
    serial = fake_lib(lib_dir / "openblas-serial/libopenblas.so.0", dynamic=True)
    prefix = tmp_path / "env"
    mkl = fake_lib(prefix / "lib/libmkl_rt.so.2", openblas=False)
    return dict(site_dirs=[str(site), str(tmp_path / "empty")], root=str(root), prefixes=[str(prefix)]), \
        dict(cmeel=cmeel, scipy=scipy, system=str(lib_dir / "libopenblas.so.0"), serial=serial, mkl=mkl)


def test_candidate_order(tmp_path):
    where, libs = make_tree(tmp_path)
    found = _blas.find_candidates({"PORTER_BLAS": "/opt/my/libblis.so"}, **where)
    assert [(c.source, c.path) for c in found] == [
        ("PORTER_BLAS", "/opt/my/libblis.so"),  # listed even if missing: its failure must be reported
        ("system-openblas", libs["system"]),
        ("system-openblas", libs["serial"]),
        ("cmeel-openblas", libs["cmeel"]),
        ("scipy-openblas", libs["scipy"]),
        ("mkl", libs["mkl"]),
    ]
    for disabled in ("none", "NONE", "off", "auto", ""):
        assert [c.source for c in _blas.find_candidates({"PORTER_BLAS": disabled}, **where)][0] == "system-openblas"
    assert _blas.find_candidates({}, site_dirs=[], root=str(tmp_path / "nothing"), prefixes=[]) == []


def test_mkl_wheels_soname_3_is_found(tmp_path):
    """mkl >= 2025.3 from pip ships libmkl_rt.so.3 (no .so.2): still a candidate, last."""
    prefix = tmp_path / "env"
    mkl = fake_lib(prefix / "lib/libmkl_rt.so.3", openblas=False)
    found = _blas.find_candidates({}, site_dirs=[], root=str(tmp_path / "nothing"), prefixes=[str(prefix)])
    assert [(c.source, c.path) for c in found] == [("mkl", mkl)]
    assert _blas.unsafe_reason(found[0], frozenset()) is None


# --------------------------------------------------------------------------- the decision


def choose(tmp_path, env=None, flags=AVX512_FLAGS, loader=None, tree=None, **kwargs):
    where, libs = tree or make_tree(tmp_path)
    loader = loader or FakeLoader()
    kwargs.setdefault("system", "Linux")
    kwargs.setdefault("preloaded", False)
    kwargs.setdefault("bind", lambda lib, path, prefix: None)
    choice = _blas.choose(env or {}, flags=flags, candidates=_blas.find_candidates(env or {}, **where),
                          load=loader, **kwargs)
    return choice, loader, libs


def test_first_safe_candidate_wins(tmp_path):
    choice, loader, libs = choose(tmp_path)
    assert loader.loaded == [libs["system"]]
    assert (choice.library, choice.source, choice.hint) == (libs["system"], "system-openblas", None)


def test_pip_openblas_when_no_system_openblas(tmp_path):
    tree = make_tree(tmp_path)
    libs = tree[1]
    choice, loader, _ = choose(tmp_path, loader=FakeLoader(broken={libs["system"], libs["serial"]}), tree=tree)
    assert loader.loaded == [libs["cmeel"]]
    assert (choice.library, choice.source) == (libs["cmeel"], "cmeel-openblas")


def test_avx512_guard_skips_the_pip_build(tmp_path):
    tree = make_tree(tmp_path)
    libs = tree[1]
    broken = FakeLoader(broken={libs["system"], libs["serial"]})
    choice, loader, _ = choose(tmp_path, flags=AVX2_FLAGS, loader=broken, tree=tree)
    assert libs["cmeel"] not in loader.loaded  # the AVX-512 build was never loaded
    assert choice.source == "scipy-openblas"  # the DYNAMIC_ARCH pip build runs on any x86-64
    skipped = {s[0]: s for s in choice.skipped}
    assert skipped["cmeel-openblas"][1] == libs["cmeel"] and "avx512f" in skipped["cmeel-openblas"][2]


def test_prefixed_symbols_are_bound_under_their_prefix(tmp_path):
    """scipy-openblas exports `scipy_cblas_sgemm`: MLX's `cblas_sgemm` slot is bound to it, and the choice says so."""
    tree = make_tree(tmp_path)
    libs = tree[1]
    bound = []
    broken = FakeLoader(broken={libs["system"], libs["serial"]})
    choice, loader, _ = choose(tmp_path, flags=AVX2_FLAGS, loader=broken, tree=tree,
                               bind=lambda lib, path, prefix: bound.append((path, prefix)))
    assert bound == [(libs["scipy"], "scipy_")]
    assert (choice.library, choice.prefix, choice.to_dict()["symbol_prefix"]) == (libs["scipy"], "scipy_", "scipy_")
    # without it, MKL is next
    broken = FakeLoader(broken={libs["system"], libs["serial"], libs["scipy"]})
    choice, _, _ = choose(tmp_path, flags=AVX2_FLAGS, loader=broken, tree=tree)
    assert (choice.source, choice.prefix) == ("mkl", "")


def test_load_failure_falls_through(tmp_path):
    tree = make_tree(tmp_path)
    libs = tree[1]
    choice, loader, _ = choose(tmp_path, loader=FakeLoader(broken={libs["system"], libs["serial"]}), tree=tree)
    assert loader.loaded == [libs["cmeel"]]
    assert [s[0] for s in choice.skipped] == ["system-openblas", "system-openblas"]
    assert all("failed to load" in s[2] for s in choice.skipped)


def test_library_without_standard_symbols_is_skipped(tmp_path):
    """A BLAS whose symbols are prefixed (scipy-openblas32) loads, but MLX would never call it."""
    tree = make_tree(tmp_path)
    libs = tree[1]
    choice, loader, _ = choose(tmp_path, loader=FakeLoader(prefixed={libs["system"]}), tree=tree)
    assert choice.source == "system-openblas" and choice.library == libs["serial"]
    assert choice.skipped == [("system-openblas", libs["system"],
                               "loaded, but exports no cblas_sgemm or scipy_cblas_sgemm, so MLX would not use it")]


def test_env_override(tmp_path):
    mine = fake_lib(tmp_path / "mine/libopenblas.so.0", target="HASWELL")
    choice, loader, _ = choose(tmp_path, env={"PORTER_BLAS": mine})
    assert loader.loaded == [mine]
    assert choice.source == "PORTER_BLAS" and choice.reason == f"PORTER_BLAS={mine}"


def test_env_override_unusable_warns_and_continues(tmp_path):
    with pytest.warns(UserWarning, match=r"PORTER_BLAS=/missing/libblas.so not used \(no such file\)"):
        choice, loader, libs = choose(tmp_path, env={"PORTER_BLAS": "/missing/libblas.so"})
    assert choice.source == "system-openblas" and loader.loaded == [libs["system"]]
    avx512 = fake_lib(tmp_path / "mine/libopenblas.so.0", target="SKYLAKEX")
    with pytest.warns(UserWarning, match="lacks avx512f"):
        choice, loader, libs = choose(tmp_path / "again", env={"PORTER_BLAS": avx512}, flags=AVX2_FLAGS)
    assert avx512 not in loader.loaded and choice.source == "system-openblas"


def test_porter_blas_none_loads_nothing_and_is_silent(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        choice, loader, _ = choose(tmp_path, env={"PORTER_BLAS": "none"})
    assert loader.loaded == [] and choice.library is None and choice.hint is None
    assert choice.reason == "disabled by PORTER_BLAS=none"


def test_fallback_hint_when_nothing_found(tmp_path):
    loader = FakeLoader()
    choice = _blas.choose({}, system="Linux", preloaded=False, flags=AVX2_FLAGS, candidates=[], load=loader)
    assert choice.library is None and choice.source == "bundled"
    assert choice.hint == _blas.HINT and "\n" not in _blas.HINT and "porter-mlx[fast-cpu]" in _blas.HINT


def test_fallback_hint_names_what_was_skipped(tmp_path):
    """The fast-cpu extra installed on a CPU without AVX-512: the one-line hint says why it is not used."""
    lib = Candidate("cmeel-openblas", fake_lib(tmp_path / "libopenblas.so.0", target="SKYLAKEX"))
    loader = FakeLoader()
    choice = _blas.choose({}, system="Linux", preloaded=False, flags=AVX2_FLAGS, candidates=[lib], load=loader)
    assert loader.loaded == [] and choice.library is None
    assert choice.hint.startswith(_blas.HINT) and "\n" not in choice.hint
    assert "cmeel-openblas (built for SKYLAKEX, this CPU lacks avx512f" in choice.hint


def test_macos_does_nothing(tmp_path):
    choice, loader, _ = choose(tmp_path, system="Darwin")
    assert loader.loaded == [] and choice.source == "Accelerate" and choice.hint is None


def test_preloaded_blas_is_left_alone(tmp_path):
    """A BLAS the user put in the global scope (LD_PRELOAD) is what MLX uses: Porter loads nothing."""
    choice, loader, _ = choose(tmp_path, preloaded="/opt/preloaded/libopenblas.so.0")
    assert loader.loaded == [] and choice.library == "/opt/preloaded/libopenblas.so.0"
    assert choice.source == "preloaded" and choice.hint is None


def test_bind_failure_falls_through(tmp_path):
    """A library MLX's calls cannot be pointed at is skipped with the reason, and the next candidate is tried."""
    tree = make_tree(tmp_path)
    libs = tree[1]
    refuse = {libs["system"]: "provides none of the BLAS functions MLX calls"}
    choice, loader, _ = choose(tmp_path, tree=tree, bind=lambda lib, path, prefix: refuse.get(path))
    assert choice.source == "system-openblas" and choice.library == libs["serial"]
    assert choice.skipped == [("system-openblas", libs["system"], refuse[libs["system"]])]


def test_missing_gfortran_is_borrowed_from_mlx(tmp_path, monkeypatch):
    """cmeel-openblas needs libgfortran.so.5; without it on the system, mlx-cpu's bundled copy is used."""
    calls = []
    lib = Candidate("cmeel-openblas", str(tmp_path / "libopenblas.so.0"))

    def loader(path):
        if not calls:
            calls.append(path)
            raise OSError("libgfortran.so.5: cannot open shared object file: No such file or directory")
        calls.append(path)

    monkeypatch.setattr(_blas, "_gfortran_from_mlx", lambda: "/x/mlx_cpu.libs/libgfortran-abc.so.5.0.0")
    monkeypatch.setattr(_blas, "provide_gfortran", lambda bundled, load: calls.append(("shim", bundled)))
    _blas.load_candidate(lib, loader)
    assert calls == [lib.path, ("shim", "/x/mlx_cpu.libs/libgfortran-abc.so.5.0.0"), lib.path]
    with pytest.raises(OSError, match="other.so"):
        _blas.load_candidate(lib, _raise_other)  # another missing library: not ours to fix


def _raise_other(path):
    raise OSError("other.so: cannot open shared object file")


# --------------------------------------------------------------------------- cache limit


@pytest.mark.parametrize("text, expected", [("4096", 4096), ("512MB", 512 * 10**6), ("1GiB", 1 << 30),
                                            ("1.5g", 3 << 29), (" 64 mib ", 64 << 20)])
def test_parse_size(text, expected):
    assert _runtime.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "-1", "5 parsecs", "1e9"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="PORTER_CACHE_LIMIT"):
        _runtime.parse_size(text)


def test_set_cache_limit_roundtrip_and_errors():
    before = _runtime.get_cache_limit()
    try:
        assert _runtime.set_cache_limit("256MiB") == before
        assert _runtime.get_cache_limit() == 256 << 20
        with pytest.raises(ValueError, match=r"\[set_cache_limit\] 'limit' must be non-negative but got -1"):
            _runtime.set_cache_limit(-1)
        with pytest.raises(TypeError, match="'limit' must be an int"):
            _runtime.set_cache_limit(1.5)
    finally:
        _runtime.set_cache_limit(before)


def test_default_cache_limit_is_bounded():
    limit = _runtime.default_cache_limit()
    assert 0 < limit <= _runtime.DEFAULT_CACHE_LIMIT
    total = _runtime._total_memory()
    assert total is None or limit <= total // 8


# --------------------------------------------------------------------------- the real thing, in fresh processes


def run_python(code, **env):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PORTER_")}
    full_env.update(env)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


CORRECTNESS = """
    import json, sys
    {first}
    import mlx.core as mx, numpy as np
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((300, 200), dtype=np.float32), rng.standard_normal((200, 170), dtype=np.float32)
    got = np.array(mx.array(a) @ mx.array(b))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max(), np.abs(got - ref).max()
    x = rng.standard_normal((2, 9, 13, 5), dtype=np.float32)   # NHWC
    w = rng.standard_normal((7, 3, 3, 5), dtype=np.float32)    # (C_out, kh, kw, C_in)
    got = np.array(mx.conv2d(mx.array(x), mx.array(w), stride=(2, 1), padding=1))
    if {torch}:
        import torch
        ref = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2),
                                         torch.from_numpy(w).permute(0, 3, 1, 2), stride=(2, 1),
                                         padding=1).permute(0, 2, 3, 1).numpy()
    else:  # float64 sum over the 3x3 taps
        xp = np.pad(x.astype(np.float64), [(0, 0), (1, 1), (1, 1), (0, 0)])
        ref = sum(np.einsum("nhwc,oc->nhwo", xp[:, i:i + 9:2, j:j + 13, :], w[:, i, j, :].astype(np.float64))
                  for i in range(3) for j in range(3))
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max(), np.abs(got - ref).max()
    import porter
    print(json.dumps(porter.runtime_info()))
"""


def test_import_porter_gives_mlx_a_correct_fast_blas():
    proc = run_python(CORRECTNESS.format(first="import porter", torch=True))
    info = json.loads(proc.stdout)
    blas = info["blas"]
    safe = [c for c in _blas.find_candidates({}) if _blas.unsafe_reason(c, _blas.cpu_flags()) is None]
    if safe:
        assert blas["library"] == safe[0].path and blas["hint"] is None
        # What MLX actually calls (its GOT slot for cblas_sgemm) is the library reported.
        assert os.path.realpath(info["blas_symbol_provider"]) == os.path.realpath(blas["library"])
        assert blas["threads"] >= 1
        assert "porter:" not in proc.stderr
    else:
        assert blas["library"] is None and blas["hint"].startswith(_blas.HINT) and "porter-mlx[fast-cpu]" in proc.stderr
    if info["malloc_trim"] is None:  # not glibc: MLX's cache keeps the freed buffers
        assert info["cache_limit"] == _runtime.default_cache_limit()
    else:  # glibc keeps them (porter/_malloc.py), MLX caches none
        assert info["cache_limit"] == 0 and info["malloc_trim"] == _runtime.default_cache_limit()
    assert info["device"].startswith("Device(cpu")


def test_porter_blas_none_subprocess_is_silent_and_correct():
    proc = run_python(CORRECTNESS.format(first="import porter", torch=False), PORTER_BLAS="none",
                      PORTER_CACHE_LIMIT="64MiB")
    info = json.loads(proc.stdout)
    assert info["blas"]["library"] is None and info["blas"]["reason"] == "disabled by PORTER_BLAS=none"
    assert os.path.basename(info["blas_symbol_provider"]).startswith("libblas")  # MLX's bundled one
    assert info["cache_limit"] == 64 << 20 and info["cache_limit_how"] == "PORTER_CACHE_LIMIT=64MiB"
    assert info["malloc_trim"] is None  # an explicit MLX cache leaves glibc's policy alone
    assert "porter:" not in proc.stderr


def test_mlx_imported_before_porter_subprocess():
    """MLX imported (and used) first still gets the optimized BLAS: Porter rewrites MLX's GOT, not the load order."""
    proc = run_python(CORRECTNESS.format(first="import mlx.core; mlx.core.eval(mlx.core.ones((4, 4)) @ "
                                               "mlx.core.ones((4, 4)))", torch=False))
    info = json.loads(proc.stdout)
    safe = [c for c in _blas.find_candidates({}) if _blas.unsafe_reason(c, _blas.cpu_flags()) is None]
    if not safe:
        pytest.skip("no optimized BLAS installed for this CPU")
    assert info["blas"]["library"] == safe[0].path
    assert os.path.realpath(info["blas_symbol_provider"]) == os.path.realpath(safe[0].path)



def test_scipy_openblas_prefixed_build_is_bound_and_correct():
    """The `scipy_`-prefixed DYNAMIC_ARCH build (fast-cpu extra, any x86-64/aarch64 CPU), named explicitly so this runs
    on machines where an earlier candidate would win: MLX's matmul/conv agree with numpy/torch, and what MLX's
    `cblas_sgemm` slot calls is that library."""
    paths = [c.path for c in _blas.find_candidates({}) if c.source == "scipy-openblas"]
    if not paths:
        pytest.fail("scipy-openblas32 is part of the fast-cpu extra that scripts/setup.sh installs; it is missing")
    proc = run_python(CORRECTNESS.format(first="import porter", torch=True), PORTER_BLAS=paths[0])
    info = json.loads(proc.stdout)
    assert info["blas"]["library"] == paths[0] and info["blas"]["symbol_prefix"] == "scipy_"
    assert os.path.realpath(info["blas_symbol_provider"]) == os.path.realpath(paths[0])
    assert "DYNAMIC_ARCH" in info["blas"]["config"] and info["blas"]["threads"] >= 1
    assert "porter:" not in proc.stderr


TORCH_BLAS = """
    import hashlib, json, sys
    order = {order!r}
    if order == "global_preload":  # control: the old way, an optimized BLAS in the global scope before torch
        from porter import _blas
        _blas.load_candidate(_blas.Candidate("control", {library!r}), _blas._load_global)
    if order == "porter_first":
        import porter
    import torch
    if order == "torch_first":
        import porter
    from porter import _bind
    torch.manual_seed(0)
    a, b = torch.randn(257, 311), torch.randn(311, 129)
    x, w = torch.randn(2, 16, 19, 23), torch.randn(24, 16, 3, 3)
    out = [a @ b, torch.nn.functional.conv2d(x, w, padding=1), torch.nn.functional.linear(a, b.T)]
    digest = hashlib.sha256(b"".join(t.contiguous().numpy().tobytes() for t in out)).hexdigest()
    torch_lib = _bind.loaded_path("libtorch_cpu.so")
    print(json.dumps({{"sgemm_": _bind.provider(torch_lib, "sgemm_"), "digest": digest}}))
"""


def test_porter_does_not_change_torchs_blas():
    """Whatever the import order, torch's own sgemm_ calls stay in libtorch_cpu (read from its GOT) and torch's
    results are bit-identical to a process without Porter; the control (a BLAS loaded globally first, what Porter
    used to do) shows that the check sees the difference."""
    safe = [c for c in _blas.find_candidates({}) if _blas.unsafe_reason(c, _blas.cpu_flags()) is None]
    if not safe:
        pytest.skip("no optimized BLAS installed for this CPU: nothing Porter could hand to torch")
    # The control needs a library exporting the standard names; a `scipy_`-prefixed build cannot take torch's
    # `sgemm_` at all (checked here instead).
    standard = [c for c in safe if c.source != "scipy-openblas"]
    orders = ("torch_only", "porter_first", "torch_first") + (("global_preload",) if standard else ())
    if not standard:
        lib = _blas.load_candidate(safe[0])
        assert not hasattr(lib, "sgemm_") and hasattr(lib, "scipy_sgemm_")
    results = {}
    for order in orders:
        code = TORCH_BLAS.format(order=order, library=(standard or safe)[0].path)
        env = {"PORTER_BLAS": "none"} if order == "torch_only" else {}  # the reference: Porter loads no BLAS
        results[order] = json.loads(run_python(code, **env).stdout)
    torch_lib = results["torch_only"]["sgemm_"]
    assert os.path.basename(torch_lib) == "libtorch_cpu.so"
    for order in ("porter_first", "torch_first"):
        assert results[order]["sgemm_"] == torch_lib, order
        assert results[order]["digest"] == results["torch_only"]["digest"], order
    if standard:
        assert os.path.realpath(results["global_preload"]["sgemm_"]) == os.path.realpath(standard[0].path)


def test_porter_doctor_command():
    from click.testing import CliRunner

    from porter.cli.main import main

    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "blas" in result.output and "cache limit" in result.output and "mlx " in result.output
    result = CliRunner().invoke(main, ["doctor", "--json"])
    assert result.exit_code == 0 and set(json.loads(result.output)) >= {"blas", "mlx", "device", "cache_limit"}


IDLE_SPIN = """
    import json, os, resource, time
    import porter
    import mlx.core as mx
    a = mx.random.normal((768, 768))
    for _ in range(4):
        mx.eval(a @ a)  # big enough for OpenBLAS to use its second thread
    time.sleep(0.02)
    before = time.process_time()
    time.sleep(0.25)  # nothing runs: whatever CPU the process uses now is idle BLAS threads spinning
    idle_ms = (time.process_time() - before) * 1e3
    print(json.dumps(dict(idle_ms=idle_ms, env=os.environ.get("OPENBLAS_THREAD_TIMEOUT"),
                          blas=porter.runtime_info()["blas"])))
"""


def test_idle_blas_threads_sleep_at_once():
    """After a threaded GEMM the OpenBLAS workers Porter loaded sleep instead of spinning ~0.1 s (which held the
    second core from MLX and Porter's kernels: Swin-T 2 threads 189 -> 159 ms); the variable is gone again from the
    environment; a user's own OPENBLAS_THREAD_TIMEOUT wins (the control: spinning shows as CPU time while asleep)."""
    quiet = json.loads(run_python(IDLE_SPIN, PORTER_BLAS_THREADS="2").stdout)
    if not (quiet["blas"]["config"] or "").startswith("OpenBLAS"):
        pytest.skip("no OpenBLAS loaded for MLX on this machine")
    assert quiet["blas"]["threads"] == 2
    assert quiet["env"] is None  # set only while the library loaded
    assert quiet["idle_ms"] < 15, quiet
    spinning = json.loads(run_python(IDLE_SPIN, PORTER_BLAS_THREADS="2", OPENBLAS_THREAD_TIMEOUT="28").stdout)
    assert spinning["env"] == "28"
    # relative as well as absolute: on a loaded machine the spinning worker gets only part of a core (10 ms measured
    # at a load of 5 on 2 cores, ~90 ms quiet), so the control alone cannot tell the two apart
    assert spinning["idle_ms"] > max(5.0, 4 * quiet["idle_ms"]), (quiet, spinning)


def test_thread_timeout_is_set_only_while_loading():
    env = {"PATH": "x"}
    with _blas._thread_timeout(env):
        assert env["OPENBLAS_THREAD_TIMEOUT"] == _blas.THREAD_TIMEOUT
    assert env == {"PATH": "x"}
    for name in _blas.THREAD_TIMEOUT_VARS:  # the user's own setting is kept and not removed
        env = {name: "20"}
        with _blas._thread_timeout(env):
            assert env == {name: "20"}
        assert env == {name: "20"}
