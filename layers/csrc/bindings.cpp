// The `_porter_kernels` Python module: one NB_MODULE that calls each family's bind_<family> (ops_common.h).
//
// A new family: header + .cpp + bind_X. The loop nests go in a new `<family>_kernels.h` (no MLX graph code), the
// mx::Primitive classes, their VJPs/vmaps, the checked ops and `void bind_<family>(nb::module_& m)` in a new
// `<family>_ops.cpp` that includes "ops_common.h" and its header; declare bind_<family> at the end of ops_common.h
// and call it below; list the new files in CMakeLists.txt (PORTER_SOURCES) and in layers/_native_build.py::SOURCES
// (the build tag hashes them). A new op of an existing family goes in that family's files.
#include "ops_common.h"

NB_MODULE(_porter_kernels, m) {
  m.doc() = "Porter's native CPU kernels for MLX (channels-last pooling and depthwise convolution).";
  porter::bind_pool(m);
  porter::bind_elementwise(m);
  porter::bind_activation(m);
  porter::bind_norm(m);
  porter::bind_conv(m);
  porter::bind_grouped_conv(m);
  porter::bind_quantize(m);
  porter::bind_winograd(m);
  porter::bind_conv3d(m);
  porter::bind_flip_conv_weight(m);
  porter::bind_linear(m);
  porter::bind_resample(m);
  porter::bind_col2im(m);
  porter::bind_concat(m);
  porter::bind_shuffle(m);
  porter::bind_matmul(m);
  porter::bind_reshape(m);
  porter::bind_binary(m);
  porter::bind_roll(m);
  m.def("num_threads", &porter::num_threads);
  m.def("set_num_threads", &porter::set_num_threads, nb::arg("n"));
}
