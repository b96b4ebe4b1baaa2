"""The README's C++ route: a program linked against MLX only (no Python at all) loads the .mlxfn with
``mx::import_function`` and gives torch's numbers. Needs CMake and a C++20 compiler, as ``porter build-kernels``."""

import importlib.util
import subprocess
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

import porter
from porter.layers import _native_build

from tests.models import REGISTRY, make_inputs
from tests.export.mlxfn_check import assert_close, port_inputs, to_torch_layout, torch_outputs

MAIN = r"""
#include <string>
#include <vector>
#include "mlx/mlx.h"

namespace mx = mlx::core;

// usage: run_mlxfn MODEL.mlxfn OUT_PREFIX IN0.npy [IN1.npy ...]  -> OUT_PREFIX0.npy, ...
int main(int argc, char** argv) {
  auto model = mx::import_function(argv[1]);
  std::vector<mx::array> inputs;
  for (int i = 3; i < argc; ++i) inputs.push_back(mx::load(argv[i]));
  auto outputs = model(inputs);
  mx::eval(outputs);
  for (size_t i = 0; i < outputs.size(); ++i) mx::save(std::string(argv[2]) + std::to_string(i) + ".npy", outputs[i]);
  return 0;
}
"""

CMAKE = """cmake_minimum_required(VERSION 3.24)
project(run_mlxfn LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(MLX CONFIG REQUIRED)
add_executable(run_mlxfn main.cpp)
target_link_libraries(run_mlxfn PRIVATE mlx)
"""


@pytest.mark.slow
def test_cpp_program_runs_the_file(tmp_path):
    cmake = _native_build._tool("cmake")
    assert cmake, "CMake is needed (as for `porter build-kernels`): pip install cmake"
    (tmp_path / "main.cpp").write_text(MAIN)
    (tmp_path / "CMakeLists.txt").write_text(CMAKE)
    mlx_root = Path(importlib.util.find_spec("mlx").submodule_search_locations[0])
    for cmd in ([cmake, "-S", str(tmp_path), "-B", str(tmp_path / "build"), f"-DMLX_ROOT={mlx_root}",
                 "-DCMAKE_BUILD_TYPE=Release"], [cmake, "--build", str(tmp_path / "build")]):
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    spec = REGISTRY["mobilenet_v3"]
    model, inputs = spec.builder(seed=0), make_inputs(spec.inputs)
    ported = porter.convert(model, inputs, dynamic="static")
    args = port_inputs(ported, inputs)
    report = porter.export_function(ported, tmp_path / "m.mlxfn", args)
    names = []
    for i, a in enumerate(args):
        names.append(str(tmp_path / f"in{i}.npy"))
        np.save(names[-1], np.array(a))
    run = subprocess.run([str(tmp_path / "build" / "run_mlxfn"), report.path, str(tmp_path / "out"), *names],
                         capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stdout + run.stderr
    outputs = [np.load(tmp_path / f"out{i}.npy") for i in range(len(report.output_names))]
    assert_close(outputs[0], np.array(ported(*args)), what="C++ vs the port")
    assert_close(to_torch_layout(ported, outputs)[0], torch_outputs(model, inputs)[0], what="C++ vs torch")
    assert mx.import_function(report.path)(*args)[0].shape == outputs[0].shape
