// What every family of Porter's native ops uses (layers/csrc/*_ops.cpp): MLX's primitive API and nanobind, the
// window tables and dtype dispatch (windows.h, dispatch.h), the thread pool (parallel.h), and the glue between a
// primitive and its kernel: `launch` (run on the CPU stream), `no_gpu`, `vmap_into_batch` (mx.vmap as a bigger
// batch), `fail` (errors in Porter's words), and the autodiff helpers. One family = one kernel header (the loop
// nests, no MLX graph code) + one *_ops.cpp (its mx::Primitive classes with their VJPs/vmaps, the checked ops that
// build them, and `bind_<family>`, declared at the end of this file and called from bindings.cpp).
//
// Layouts: inputs are batched channels-last `(N, *spatial, C)` with 1-3 spatial dims; indices are int64 flat
// offsets inside each (n, c) plane, torch's format. The primitives are CPU-only and carry their own VJPs.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/array.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"
#include "mlx/primitives.h"
#include "mlx/stream.h"
#include "mlx/transforms.h"
#include "mlx/utils.h"

#include "dispatch.h"
#include "parallel.h"
#include "strided_copy.h"
#include "windows.h"

namespace nb = nanobind;

namespace porter {

using Ints = std::vector<int64_t>;
using Table = std::vector<Ints>;

[[noreturn]] inline void fail(const std::string& what, const std::string& msg) {
  throw std::invalid_argument("[porter." + what + "] " + msg);
}

inline mx::Stream cpu_stream(const char* what) {
  mx::Stream s = mx::default_stream(mx::default_device());
  if (s.device != mx::Device::cpu) {
    fail(what, "native kernels run on the CPU only; the default device is not the CPU");
  }
  return s;
}

inline void check_batched(const mx::array& x, const char* what, const char* arg) {
  if (x.ndim() < 3 || x.ndim() > 5) {
    std::ostringstream msg;
    msg << arg << " must be batched channels-last (N, *spatial, C) with 1 to 3 spatial dims, got shape " << x.shape();
    fail(what, msg.str());
  }
}

// The inputs of a primitive's eval_cpu in a layout its kernel reads (`readable(a)`): each input as given where it is
// (so a donatable input stays donatable), else a row-contiguous copy made by a task dispatched on the stream before the
// kernel's (the encoder keeps both arrays alive until it has run). `copied[i]`, if asked for, says which are such
// private copies.
template <typename P>
std::vector<mx::array> readable_inputs(const std::vector<mx::array>& inputs, mx::Stream s, P&& readable,
                                       std::vector<bool>* copied = nullptr) {
  if (copied) copied->assign(inputs.size(), false);
  std::vector<mx::array> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const mx::array& a = inputs[i];
    if (readable(a)) {
      out.push_back(a);
      continue;
    }
    auto& enc = mx::cpu::get_command_encoder(s);
    mx::array c(a.shape(), a.dtype(), nullptr, {});
    c.set_data(mx::allocator::malloc(c.nbytes()));
    enc.set_input_array(a);
    enc.set_output_array(c);
    enc.dispatch([src = mx::array::unsafe_weak_copy(a), dst = mx::array::unsafe_weak_copy(c)]() mutable {
      strided_copy(src.data<char>(), dst.data<char>(), src.shape(), src.strides(), src.itemsize());
    });
    enc.add_temporary(c);
    out.push_back(c);
    if (copied) (*copied)[i] = true;
  }
  return out;
}

inline bool is_row_contiguous(const mx::array& a) { return a.flags().row_contiguous; }

// Dispatches `body(inputs, outputs)` on the stream's CPU thread (the outputs' buffers already set), the inputs as
// given: the callers make them readable first.
template <typename Body>
void dispatch_as_given(mx::Stream s, const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs,
                       Body& body) {
  auto& enc = mx::cpu::get_command_encoder(s);
  std::vector<mx::array> ins, outs;
  for (auto& i : inputs) {
    enc.set_input_array(i);
    ins.push_back(mx::array::unsafe_weak_copy(i));
  }
  for (auto& o : outputs) {
    enc.set_output_array(o);
    outs.push_back(mx::array::unsafe_weak_copy(o));
  }
  size_t bytes = 0;
  for (auto& o : outputs) bytes += o.nbytes();
  enc.dispatch([ins = std::move(ins), outs = std::move(outs), body = std::move(body)]() mutable { body(ins, outs); });
  // Pacing (issue 15): MLX's eval loop blocks only when more than 10 tasks of 10 dispatches each are queued, and
  // everything scheduled before that point has its outputs allocated. An op writing N MiB counts as N more
  // (empty) dispatches, so the loop runs about 100 MiB of native outputs ahead of the compute instead of tens of
  // whole ops. Its wait is a condition variable, not a spin.
  for (size_t i = 0, n = std::min<size_t>(bytes >> 20, 64); i < n; ++i) enc.dispatch([] {});
}

// Runs `body(inputs, outputs)` on the stream's CPU thread (the outputs' buffers already set), every input
// row-contiguous (a strided input is copied by a task of its own first). The ops therefore put no mx::contiguous node
// in front of their inputs: each graph node costs ~10 us to schedule and run on the CPU stream (a batch-1
// RegNetY-400MF forward had 264 of them among its 881 nodes), as much as LayerNorm's whole kernel on a (49, 96) Swin
// window.
template <typename Body>
void dispatch_body(mx::Stream s, const std::vector<mx::array>& given, std::vector<mx::array>& outputs, Body body) {
  dispatch_as_given(s, readable_inputs(given, s, is_row_contiguous), outputs, body);
}

// One output, `body` run on inputs as `readable` accepts them (the rest copied row-contiguous first).
template <typename P, typename Body>
void launch_readable(mx::Stream s, const std::vector<mx::array>& given, mx::array& output, P&& readable, Body body) {
  output.set_data(mx::allocator::malloc(output.nbytes()));
  std::vector<mx::array> outputs{output};
  dispatch_as_given(s, readable_inputs(given, s, std::forward<P>(readable)), outputs, body);
}

// Allocates the outputs and runs `body(inputs, outputs)` on the stream's CPU thread.
template <typename Body>
void launch(mx::Stream s, const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs, Body body) {
  for (auto& o : outputs) o.set_data(mx::allocator::malloc(o.nbytes()));
  dispatch_body(s, inputs, outputs, std::move(body));
}

// The same for a primitive with one output (mx::UnaryPrimitive::eval_cpu).
template <typename Body>
void launch(mx::Stream s, const std::vector<mx::array>& inputs, mx::array& output, Body body) {
  std::vector<mx::array> outputs{output};
  launch(s, inputs, outputs, std::move(body));
}

// The same for an elementwise kernel whose output has its first input's shape and dtype and which reads each element
// before writing the same index: the output takes that input's buffer when nothing else holds it (MLX's own unary
// ops do the same), or the buffer of the private row-contiguous copy a strided first input gets. MLX's CPU eval loop
// allocates outputs up to ~10 tasks before they are computed, so every buffer an op does not allocate is one fewer
// held live during that run-ahead (issue 15: run-time memory).
template <typename Body>
void launch_in_place(mx::Stream s, const std::vector<mx::array>& given, mx::array& output, Body body) {
  const bool donatable = given[0].is_donatable();  // before the list below holds a second reference to it
  std::vector<bool> copied;
  std::vector<mx::array> inputs = readable_inputs(given, s, is_row_contiguous, &copied);
  const mx::array& x = inputs[0];
  std::vector<mx::array> outputs{output};
  if ((copied[0] || donatable) && x.flags().row_contiguous && x.data_size() == x.size() &&
      x.dtype() == output.dtype() && x.size() == output.size()) {
    outputs[0].copy_shared_buffer(x);
  } else {
    outputs[0].set_data(mx::allocator::malloc(output.nbytes()));
  }
  dispatch_as_given(s, inputs, outputs, body);
}

// Every primitive's eval_gpu: the kernels are CPU code (the layers keep their pure-MLX path on GPUs).
[[noreturn]] inline void no_gpu(const char* what) {
  throw std::runtime_error(std::string("[porter.") + what + "] no GPU kernel: runs on the CPU stream only");
}

template <typename P>
bool same_type(const mx::Primitive& a, const mx::Primitive& b) {
  return dynamic_cast<const P*>(&b) != nullptr && dynamic_cast<const P*>(&a) != nullptr;
}

// ------------------------------------------------------------------------------------------------ vmap
// mx.vmap over a kernel: every mapped input's vmap axis joins its batch axis (axis 0), inputs that carry the batch
// but are not mapped (`batched[i]`) are broadcast along the vmap axis, the kernel runs once on the merged batch,
// and each output is split back into (V, N, ...) with the vmap axis first. Inputs that are not per-example (batch
// norm's per-channel alpha/beta) cannot be mapped.
template <typename Build>
std::pair<std::vector<mx::array>, std::vector<int>> vmap_into_batch(mx::Stream s, const char* what,
                                                                    const std::vector<mx::array>& inputs,
                                                                    const std::vector<int>& axes,
                                                                    const std::vector<bool>& batched, Build build) {
  int v = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (axes[i] < 0) continue;
    if (!batched[i]) fail(what, "vmap over this argument is not supported");
    v = inputs[i].shape(axes[i]);
  }
  std::vector<mx::array> merged;
  for (size_t i = 0; i < inputs.size(); ++i) {
    mx::array a = inputs[i];
    if (!batched[i]) {
      merged.push_back(a);
      continue;
    }
    if (axes[i] >= 0) {
      a = mx::moveaxis(a, axes[i], 0, s);
    } else {
      mx::Shape shape = a.shape();
      shape.insert(shape.begin(), v);
      a = mx::broadcast_to(mx::expand_dims(a, 0, s), shape, s);
    }
    mx::Shape shape(a.shape().begin() + 1, a.shape().end());
    shape[0] *= v;
    merged.push_back(mx::reshape(a, shape, s));
  }
  std::vector<mx::array> outs = build(merged);
  std::vector<mx::array> split;
  for (auto& o : outs) {
    mx::Shape shape = o.shape();
    if (shape.empty()) {  // a scalar side output (unpool's bad-index count): the same for every example
      split.push_back(mx::broadcast_to(o, {v}, s));
      continue;
    }
    shape[0] /= v;
    shape.insert(shape.begin(), v);
    split.push_back(mx::reshape(o, shape, s));
  }
  return {split, std::vector<int>(split.size(), 0)};
}

// ------------------------------------------------------------------------------------------------ autodiff helpers
// The primitives carry their own VJPs (so a layer stays one graph node: mx.custom_function would add another,
// and on small inputs every node costs more than the kernel itself).
inline mx::array cast_like(const mx::array& a, const mx::array& like, mx::Stream s) {
  return a.dtype() == like.dtype() ? a : mx::astype(a, like.dtype(), s);
}

// A primitive's jvp as MLX's forward-mode derivative of `f`, the same function written in MLX ops: the tangents of
// the inputs not in `argnums` are zero.
template <typename F>
std::vector<mx::array> jvp_of_reference(F&& f, const std::vector<mx::array>& primals,
                                        const std::vector<mx::array>& tangents, const std::vector<int>& argnums,
                                        mx::Stream s) {
  std::vector<mx::array> full;
  for (const auto& p : primals) full.push_back(mx::zeros_like(p, s));
  for (size_t j = 0; j < argnums.size(); ++j) full[argnums[j]] = tangents[j];
  return mx::jvp(std::forward<F>(f), primals, full).second;
}

// x ** p with the shortcuts of PowerKind (torch's pow kernel), for the LP pooling gradient.
inline mx::array power_of(const mx::array& x, double p, mx::Stream s) {
  if (p == 0.0) return mx::ones_like(x, s);
  if (p == 1.0) return x;
  if (p == 2.0) return mx::multiply(x, x, s);
  if (p == 3.0) return mx::multiply(mx::multiply(x, x, s), x, s);
  if (p == 0.5) return mx::sqrt(x, s);
  if (p == -0.5) return mx::rsqrt(x, s);
  if (p == -1.0) return mx::reciprocal(x, s);
  if (p == -2.0) return mx::reciprocal(mx::multiply(x, x, s), s);
  return mx::power(x, mx::array(p, x.dtype()), s);
}

// ------------------------------------------------------------------------------------------------ bindings
// One per family (defined in its *_ops.cpp), called from NB_MODULE in bindings.cpp.
void bind_pool(nb::module_& m);
void bind_elementwise(nb::module_& m);
void bind_activation(nb::module_& m);
void bind_norm(nb::module_& m);
void bind_conv(nb::module_& m);
void bind_grouped_conv(nb::module_& m);
void bind_quantize(nb::module_& m);
void bind_winograd(nb::module_& m);
void bind_conv3d(nb::module_& m);
void bind_flip_conv_weight(nb::module_& m);
void bind_linear(nb::module_& m);
void bind_resample(nb::module_& m);
void bind_col2im(nb::module_& m);
void bind_concat(nb::module_& m);
void bind_shuffle(nb::module_& m);
void bind_matmul(nb::module_& m);
void bind_reshape(nb::module_& m);
void bind_binary(nb::module_& m);
void bind_roll(nb::module_& m);

}  // namespace porter
