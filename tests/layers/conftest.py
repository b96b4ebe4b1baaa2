"""Every layer test runs twice: through the native CPU kernels (layers/csrc) and through the pure-MLX ops that
Apple GPUs, CUDA and machines without the kernels use. Both are checked against torch in the test itself.

The native variant fails (it does not skip) when the kernels are not built: `porter build-kernels`. Setting
PORTER_NATIVE=0 deselects the native variants on purpose (the session header says so).
Tests marked ``pure_mlx`` check internals of the pure-MLX path and run in that variant only; tests marked
``native_only`` check the native kernels themselves and run in the native variant only.
"""

import os

import pytest

from porter.layers import _native

BACKENDS = ("native", "mlx")


def _native_off() -> bool:
    return not _native._env_enabled()


def pytest_configure(config):
    config.addinivalue_line("markers", "pure_mlx: checks the pure-MLX path's internals; runs without native kernels")
    config.addinivalue_line("markers", "native_only: checks the native kernels themselves; runs with them only")


def pytest_report_header(config):
    if _native_off():
        return f"layers: native-kernel variants deselected (PORTER_NATIVE={os.environ.get('PORTER_NATIVE')})"
    info = _native.status()
    where = info["directory"] if info["available"] else info["reason"]
    return f"layers: native kernels {'available' if info['available'] else 'MISSING'} ({where})"


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("backend") if callspec else None
        native_variant = backend == "native"
        if backend == "mlx" and item.get_closest_marker("native_only"):
            drop.append(item)
        elif native_variant and (_native_off() or item.get_closest_marker("pure_mlx")):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(autouse=True, params=BACKENDS)
def backend(request):
    if request.param == "native":
        if not _native.available():
            pytest.fail(f"native kernels unavailable: {_native.status()['reason']}", pytrace=False)
        with _native.use_native(True):
            yield request.param
    else:
        with _native.use_native(False):
            yield request.param
