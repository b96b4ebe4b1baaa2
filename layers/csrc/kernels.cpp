// Porter's native CPU kernels for MLX: channels-last pooling primitives (window max/sum, fractional max, plane
// scatter/gather) and depthwise convolution, exposed to Python as `_porter_kernels`. Built against the installed MLX
// by `porter build-kernels` (layers/_native.py); the layers fall back to pure MLX ops when the module is missing.
//
// Layouts: inputs are batched channels-last `(N, *spatial, C)` with 1-3 spatial dims; indices are int64 flat
// offsets inside each (n, c) plane, torch's format. The primitives are CPU-only and carry their own VJPs.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/array.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"
#include "mlx/primitives.h"
#include "mlx/stream.h"
#include "mlx/transforms.h"
#include "mlx/utils.h"

#include "activation_kernels.h"
#include "conv_kernels.h"
#include "grouped_conv_kernels.h"
#include "norm_kernels.h"
#include "elementwise_kernels.h"
#include "pool_kernels.h"
#include "quantize_kernels.h"
#include "winograd_kernels.h"

namespace nb = nanobind;

namespace porter {

using Ints = std::vector<int64_t>;
using Table = std::vector<Ints>;

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw std::invalid_argument("[porter." + what + "] " + msg);
}

mx::Stream cpu_stream(const char* what) {
  mx::Stream s = mx::default_stream(mx::default_device());
  if (s.device != mx::Device::cpu) {
    fail(what, "native kernels run on the CPU only; the default device is not the CPU");
  }
  return s;
}

void check_batched(const mx::array& x, const char* what, const char* arg) {
  if (x.ndim() < 3 || x.ndim() > 5) {
    std::ostringstream msg;
    msg << arg << " must be batched channels-last (N, *spatial, C) with 1 to 3 spatial dims, got shape " << x.shape();
    fail(what, msg.str());
  }
}

// Builds the per-dim window tables of the nd spatial dims (nd = first.size()), padded on the left to three.
std::vector<Axis> make_axes(const char* what, const Table& first, const Table& end, const Ints& step,
                            const Table& divisor, const mx::Shape& shape) {
  const size_t nd = shape.size() - 2;
  if (first.size() != nd || end.size() != nd || step.size() != nd || (!divisor.empty() && divisor.size() != nd)) {
    fail(what, "window tables must give one entry per spatial dim of the input");
  }
  std::vector<Axis> axes(nd);
  for (size_t d = 0; d < nd; ++d) {
    const int64_t extent = shape[1 + d];
    Axis& a = axes[d];
    a.first = first[d];
    a.end = end[d];
    a.step = step[d];
    if (!divisor.empty()) a.divisor = divisor[d];
    if (a.first.empty() || a.end.size() != a.first.size() ||
        (!divisor.empty() && a.divisor.size() != a.first.size()) || a.step <= 0) {
      fail(what, "window tables of a spatial dim must be non-empty, of equal length, with a positive step");
    }
    for (size_t o = 0; o < a.first.size(); ++o) {
      // taps run over [first, end) and must be real positions; `first` may lie past `end` (a window with no tap)
      if (a.end[o] > extent || (a.first[o] < 0 && a.first[o] < a.end[o])) {
        fail(what, "window table reads outside the input");
      }
    }
  }
  return pad_axes(std::move(axes));
}

mx::Shape out_shape(const mx::array& x, const std::vector<int64_t>& out_spatial) {
  mx::Shape shape{x.shape(0)};
  for (int64_t o : out_spatial) shape.push_back(static_cast<int>(o));
  shape.push_back(x.shape(-1));
  return shape;
}

// Allocates the outputs and runs `body(inputs, outputs)` on the stream's CPU thread.
template <typename Body>
void launch(mx::Stream s, const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs, Body body) {
  for (auto& o : outputs) o.set_data(mx::allocator::malloc(o.nbytes()));
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
  enc.dispatch([ins = std::move(ins), outs = std::move(outs), body = std::move(body)]() mutable { body(ins, outs); });
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

// The output shape of a window kernel: x's shape with the nd spatial extents replaced by the tables' outputs.
mx::Shape window_out_shape(const mx::array& x, const std::vector<Axis>& axes) {
  mx::Shape shape = x.shape();
  const size_t nd = x.ndim() - 2;
  for (size_t d = 0; d < nd; ++d) shape[1 + d] = static_cast<int>(axes[3 - nd + d].out());
  return shape;
}

// ------------------------------------------------------------------------------------------------ autodiff helpers
// The primitives carry their own VJPs (so a layer stays one graph node: mx.custom_function would add another,
// and on small inputs every node costs more than the kernel itself).
mx::array cast_like(const mx::array& a, const mx::array& like, mx::Stream s) {
  return a.dtype() == like.dtype() ? a : mx::astype(a, like.dtype(), s);
}

// x ** p with the shortcuts of PowerKind (torch's pow kernel), for the LP pooling gradient.
mx::array power_of(const mx::array& x, double p, mx::Stream s) {
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

// ------------------------------------------------------------------------------------------------ primitives
class WindowMaxGrad;
class WindowSum;
class PlaneScatter;
class PlaneGather;
class ChannelAffine : public mx::Primitive {
 public:
  ChannelAffine(mx::Stream s, bool relu) : mx::Primitive(s), relu_(relu) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [relu = relu_](auto& in, auto& out) {
      const auto& x = in[0];
      const int64_t C = x.ndim() ? x.shape(-1) : 1, rows = C ? x.size() / C : 0;
      dispatch_float(x.dtype(), "channel_affine", [&](auto tag) {
        using T = decltype(tag);
        channel_affine<T>(x.template data<T>(), rows, C, in[1].template data<float>(), in[2].template data<float>(),
                          relu, out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[porter.channel_affine] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return relu_ ? "PorterChannelAffineRelu" : "PorterChannelAffine"; }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "channel_affine", inputs, axes, {true, false, false},
                           [&](const std::vector<mx::array>& in) {
      return std::vector<mx::array>{mx::array(in[0].shape(), in[0].dtype(),
                                              std::make_shared<ChannelAffine>(stream(), relu_),
                                              {mx::contiguous(in[0], false, stream()), in[1], in[2]})};
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override {
    auto s = stream();
    const auto& x = primals[0];
    mx::array g = mx::astype(cotangents[0], mx::float32, s);
    if (relu_) {  // torch's relu backward: the gradient where the output is positive
      g = mx::where(mx::greater(outputs[0], mx::array(0.0f), s), g, mx::array(0.0f), s);
    }
    std::vector<int> lead;
    for (int d = 0; d + 1 < static_cast<int>(x.ndim()); ++d) lead.push_back(d);
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (arg == 0) {
        grads.push_back(mx::astype(mx::multiply(g, primals[1], s), x.dtype(), s));
      } else if (arg == 1) {
        grads.push_back(mx::sum(mx::multiply(g, mx::astype(x, mx::float32, s), s), lead, false, s));
      } else {
        grads.push_back(mx::sum(g, lead, false, s));
      }
    }
    return grads;
  }

 private:
  bool relu_;
};

class Relu : public mx::UnaryPrimitive {
 public:
  explicit Relu(mx::Stream s) : mx::UnaryPrimitive(s) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [](auto& in, auto& out) {
      dispatch_float(in[0].dtype(), "relu", [&](auto tag) {
        using T = decltype(tag);
        relu<T>(in[0].template data<T>(), static_cast<int64_t>(in[0].size()), out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.relu] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return "PorterRelu"; }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return {{mx::array(inputs[0].shape(), inputs[0].dtype(), std::make_shared<Relu>(stream()),
                       {mx::contiguous(inputs[0], false, stream())})},
            {axes[0]}};
  }
  bool is_equivalent(const mx::Primitive& other) const override { return same_type<Relu>(*this, other); }
  std::vector<mx::array> vjp(const std::vector<mx::array>&, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>& outputs) override {
    auto s = stream();  // torch's threshold_backward: the gradient where the output is positive
    const auto& g = cotangents[0];
    return {mx::where(mx::greater(outputs[0], mx::zeros({}, outputs[0].dtype(), s), s), g,
                      mx::zeros({}, g.dtype(), s), s)};
  }
};

mx::array relu_op(const mx::array& x) {
  auto s = cpu_stream("relu");
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail("relu", "x must be floating point");
  return mx::array(x.shape(), x.dtype(), std::make_shared<Relu>(s), {mx::contiguous(x, false, s)});
}

class LpRoot : public mx::UnaryPrimitive {
 public:
  LpRoot(mx::Stream s, double scale, double inv_p) : mx::UnaryPrimitive(s), scale_(scale), inv_p_(inv_p) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [scale = scale_, inv_p = inv_p_](auto& in, auto& out) {
      const auto& a = in[0];
      if (a.dtype() == mx::float64) {
        lp_root<double>(a.template data<double>(), a.size(), scale, inv_p, out[0].template data<double>());
      } else {
        lp_root<float>(a.template data<float>(), a.size(), static_cast<float>(scale), static_cast<float>(inv_p),
                       out[0].template data<float>());
      }
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.lp_root] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return "PorterLpRoot"; }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>&) override {
    // torch: pow backward g * e * m ** (e - 1) at m = a * scale, times scale, and 0 where a == 0 (sign and relu)
    auto s = stream();
    const auto& a = primals[0];
    auto dt = a.dtype();
    auto m = mx::multiply(a, mx::array(scale_, dt), s);
    auto dm = mx::multiply(mx::array(inv_p_, dt), power_of(m, inv_p_ - 1.0, s), s);
    auto da = mx::multiply(mx::multiply(cast_like(cotangents[0], a, s), dm, s), mx::array(scale_, dt), s);
    return {mx::where(mx::equal(a, mx::zeros({}, dt, s), s), mx::zeros({}, dt, s), da, s)};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return {{mx::array(inputs[0].shape(), inputs[0].dtype(), std::make_shared<LpRoot>(stream(), scale_, inv_p_),
                       {mx::contiguous(inputs[0], false, stream())})},
            {axes[0]}};
  }

 private:
  double scale_, inv_p_;
};

mx::array lp_root_op(const mx::array& a, double scale, double inv_p) {
  auto s = cpu_stream("lp_root");
  if (a.dtype() != mx::float32 && a.dtype() != mx::float64) fail("lp_root", "a must be float32 or float64");
  return mx::array(a.shape(), a.dtype(), std::make_shared<LpRoot>(s, scale, inv_p), {mx::contiguous(a, false, s)});
}

// ------------------------------------------------------------------------------------------------ activations
// Elementwise transcendental activations (csrc/activation_kernels.h): f(x) (Activation) and g * f'(x)
// (ActivationGrad), each one multi-threaded pass; the gradient's own VJP uses f'' built from MLX ops, so second
// derivatives work.
const char* act_name(Act kind) {
  static const char* names[] = {"exp", "sigmoid", "silu", "tanh", "gelu", "gelu_tanh"};
  return names[static_cast<int>(kind)];
}

mx::array make_activation_grad(mx::Stream s, Act kind, const mx::array& x, const mx::array& g);

// f''(x) in MLX ops, in x's dtype.
mx::array activation_second(Act kind, const mx::array& x, mx::Stream s) {
  auto dt = x.dtype();
  auto c = [&](double v) { return mx::array(v, dt); };
  switch (kind) {
    case Act::exp: return mx::exp(x, s);
    case Act::sigmoid: {
      auto y = mx::sigmoid(x, s);  // y (1 - y) (1 - 2y)
      return mx::multiply(mx::multiply(y, mx::subtract(c(1), y, s), s), mx::subtract(c(1), mx::multiply(c(2), y, s), s), s);
    }
    case Act::silu: {
      auto y = mx::sigmoid(x, s);  // y (1 - y) (2 + x (1 - 2y))
      auto inner = mx::add(c(2), mx::multiply(x, mx::subtract(c(1), mx::multiply(c(2), y, s), s), s), s);
      return mx::multiply(mx::multiply(y, mx::subtract(c(1), y, s), s), inner, s);
    }
    case Act::tanh: {
      auto t = mx::tanh(x, s);  // -2 t (1 - t^2)
      return mx::multiply(mx::multiply(c(-2), t, s), mx::subtract(c(1), mx::square(t, s), s), s);
    }
    case Act::gelu: {  // phi(x) (2 - x^2)
      auto pdf = mx::multiply(mx::exp(mx::multiply(c(-0.5), mx::square(x, s), s), s), c(0.39894228040143268), s);
      return mx::multiply(pdf, mx::subtract(c(2), mx::square(x, s), s), s);
    }
    case Act::gelu_tanh: {  // (1 - t^2) u' + x/2 (1 - t^2) (u'' - 2 t u'^2)
      const double beta = 0.79788456080286536, kappa = 0.044715;
      auto x2 = mx::square(x, s);
      auto t = mx::tanh(mx::multiply(c(beta), mx::add(x, mx::multiply(c(kappa), mx::multiply(x2, x, s), s), s), s), s);
      auto sech2 = mx::subtract(c(1), mx::square(t, s), s);
      auto du = mx::multiply(c(beta), mx::add(c(1), mx::multiply(c(3 * kappa), x2, s), s), s);
      auto ddu = mx::multiply(c(6 * beta * kappa), x, s);
      auto tail = mx::subtract(ddu, mx::multiply(mx::multiply(c(2), t, s), mx::square(du, s), s), s);
      return mx::add(mx::multiply(sech2, du, s), mx::multiply(mx::multiply(mx::multiply(c(0.5), x, s), sech2, s), tail, s), s);
    }
  }
  throw std::logic_error("unknown activation");
}

// Brings two elementwise operands' vmap axes together (axis 0; an unmapped one is broadcast).
std::vector<mx::array> vmap_pair(const std::vector<mx::array>& inputs, const std::vector<int>& axes, mx::Stream s) {
  int v = 0;
  for (size_t i = 0; i < inputs.size(); ++i) if (axes[i] >= 0) v = inputs[i].shape(axes[i]);
  std::vector<mx::array> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (axes[i] >= 0) {
      out.push_back(mx::contiguous(mx::moveaxis(inputs[i], axes[i], 0, s), false, s));
    } else {
      mx::Shape shape = inputs[i].shape();
      shape.insert(shape.begin(), v);
      out.push_back(mx::contiguous(mx::broadcast_to(mx::expand_dims(inputs[i], 0, s), shape, s), false, s));
    }
  }
  return out;
}

class Activation : public mx::UnaryPrimitive {
 public:
  Activation(mx::Stream s, Act kind) : mx::UnaryPrimitive(s), kind_(kind) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [kind = kind_](auto& in, auto& out) {
      dispatch_float(in[0].dtype(), act_name(kind), [&](auto tag) {
        using T = decltype(tag);
        dispatch_act(kind, [&](auto k) {
          activation<decltype(k)::value, false, T>(in[0].template data<T>(), nullptr,
                                                   static_cast<int64_t>(in[0].size()), out[0].template data<T>());
        });
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.activation] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return "PorterActivation"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<Activation>(*this, other) && static_cast<const Activation&>(other).kind_ == kind_;
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>&) override {
    return {make_activation_grad(stream(), kind_, primals[0], cotangents[0])};
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>&) override {
    return {make_activation_grad(stream(), kind_, primals[0], tangents[0])};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return {{mx::array(inputs[0].shape(), inputs[0].dtype(), std::make_shared<Activation>(stream(), kind_),
                       {mx::contiguous(inputs[0], false, stream())})},
            {axes[0]}};
  }

 private:
  Act kind_;
};

class ActivationGrad : public mx::UnaryPrimitive {
 public:
  ActivationGrad(mx::Stream s, Act kind) : mx::UnaryPrimitive(s), kind_(kind) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [kind = kind_](auto& in, auto& out) {
      dispatch_float(in[0].dtype(), act_name(kind), [&](auto tag) {
        using T = decltype(tag);
        dispatch_act(kind, [&](auto k) {
          activation<decltype(k)::value, true, T>(in[0].template data<T>(), in[1].template data<T>(),
                                                  static_cast<int64_t>(in[0].size()), out[0].template data<T>());
        });
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.activation_grad] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return "PorterActivationGrad"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<ActivationGrad>(*this, other) && static_cast<const ActivationGrad&>(other).kind_ == kind_;
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    auto s = stream();
    const auto &x = primals[0], &g = primals[1], &c = cotangents[0];
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (arg == 0) {
        grads.push_back(mx::multiply(mx::multiply(c, g, s), activation_second(kind_, x, s), s));
      } else {
        grads.push_back(make_activation_grad(s, kind_, x, c));
      }
    }
    return grads;
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override {
    auto s = stream();
    const auto &x = primals[0], &g = primals[1];
    std::optional<mx::array> out;
    for (size_t i = 0; i < argnums.size(); ++i) {
      auto term = argnums[i] == 0
                      ? mx::multiply(mx::multiply(tangents[i], g, s), activation_second(kind_, x, s), s)
                      : make_activation_grad(s, kind_, x, tangents[i]);
      out = out ? mx::add(*out, term, s) : term;
    }
    return {*out};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    auto in = vmap_pair(inputs, axes, stream());
    return {{mx::array(in[0].shape(), in[0].dtype(), std::make_shared<ActivationGrad>(stream(), kind_), in)}, {0}};
  }

 private:
  Act kind_;
};

mx::array make_activation_grad(mx::Stream s, Act kind, const mx::array& x, const mx::array& g) {
  auto gc = cast_like(g, x, s);
  if (gc.shape() != x.shape()) gc = mx::broadcast_to(gc, x.shape(), s);
  return mx::array(x.shape(), x.dtype(), std::make_shared<ActivationGrad>(s, kind),
                   {mx::contiguous(x, false, s), mx::contiguous(gc, false, s)});
}

Act parse_act(const std::string& name) {
  static const char* names[] = {"exp", "sigmoid", "silu", "tanh", "gelu", "gelu_tanh"};
  for (int i = 0; i < 6; ++i) {
    if (name == names[i]) return static_cast<Act>(i);
  }
  fail("activation", "'kind' must be one of exp, sigmoid, silu, tanh, gelu, gelu_tanh, got '" + name + "'");
}

mx::array activation_op(const mx::array& x, const std::string& kind) {
  auto s = cpu_stream("activation");
  Act k = parse_act(kind);
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail("activation", "x must be floating point");
  return mx::array(x.shape(), x.dtype(), std::make_shared<Activation>(s, k), {mx::contiguous(x, false, s)});
}

mx::array activation_grad_op(const mx::array& x, const mx::array& g, const std::string& kind) {
  auto s = cpu_stream("activation_grad");
  Act k = parse_act(kind);
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail("activation_grad", "x must be floating point");
  return make_activation_grad(s, k, x, g);
}

// ------------------------------------------------------------------------------------------------ softmax
// (outer, len, inner) of a shape around `axis`.
std::array<int64_t, 3> split_axis(const mx::Shape& shape, int axis) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (int d = axis + 1; d < static_cast<int>(shape.size()); ++d) inner *= shape[d];
  return {outer, shape[axis], inner};
}

mx::array make_softmax_grad(mx::Stream s, int axis, const mx::array& y, const mx::array& g);

class Softmax : public mx::UnaryPrimitive {
 public:
  Softmax(mx::Stream s, int axis) : mx::UnaryPrimitive(s), axis_(axis) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [axis = axis_](auto& in, auto& out) {
      auto [outer, len, inner] = split_axis(in[0].shape(), axis);
      dispatch_float(in[0].dtype(), "softmax", [&](auto tag) {
        using T = decltype(tag);
        softmax<T>(in[0].template data<T>(), outer, len, inner, out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.softmax] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return "PorterSoftmax"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<Softmax>(*this, other) && static_cast<const Softmax&>(other).axis_ == axis_;
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>&, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>& outputs) override {
    return {make_softmax_grad(stream(), axis_, outputs[0], cotangents[0])};
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>&) override {
    auto y = mx::array(primals[0].shape(), primals[0].dtype(), std::make_shared<Softmax>(stream(), axis_),
                       {primals[0]});
    return {make_softmax_grad(stream(), axis_, y, tangents[0])};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    int axis = axis_ + (axes[0] >= 0 && axes[0] <= axis_ ? 1 : 0);
    return {{mx::array(inputs[0].shape(), inputs[0].dtype(), std::make_shared<Softmax>(stream(), axis),
                       {mx::contiguous(inputs[0], false, stream())})},
            {axes[0]}};
  }

 private:
  int axis_;
};

class SoftmaxGrad : public mx::UnaryPrimitive {
 public:
  SoftmaxGrad(mx::Stream s, int axis) : mx::UnaryPrimitive(s), axis_(axis) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [axis = axis_](auto& in, auto& out) {
      auto [outer, len, inner] = split_axis(in[0].shape(), axis);
      dispatch_float(in[0].dtype(), "softmax_grad", [&](auto tag) {
        using T = decltype(tag);
        softmax_grad<T>(in[0].template data<T>(), in[1].template data<T>(), outer, len, inner,
                        out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.softmax_grad] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return "PorterSoftmaxGrad"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<SoftmaxGrad>(*this, other) && static_cast<const SoftmaxGrad&>(other).axis_ == axis_;
  }
  // out = y (g - sum(g y)): d/dg is the same map of the cotangent; d/dy = c (g - sum(g y)) - g sum(c y)
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    auto s = stream();
    const auto &y = primals[0], &g = primals[1], &c = cotangents[0];
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (arg == 0) {
        auto gy = mx::sum(mx::multiply(g, y, s), axis_, true, s);
        auto cy = mx::sum(mx::multiply(c, y, s), axis_, true, s);
        grads.push_back(mx::subtract(mx::multiply(c, mx::subtract(g, gy, s), s), mx::multiply(g, cy, s), s));
      } else {
        grads.push_back(make_softmax_grad(s, axis_, y, c));
      }
    }
    return grads;
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    auto in = vmap_pair(inputs, axes, stream());
    return {{mx::array(in[0].shape(), in[0].dtype(), std::make_shared<SoftmaxGrad>(stream(), axis_ + 1), in)}, {0}};
  }

 private:
  int axis_;
};

mx::array make_softmax_grad(mx::Stream s, int axis, const mx::array& y, const mx::array& g) {
  auto gc = cast_like(g, y, s);
  if (gc.shape() != y.shape()) gc = mx::broadcast_to(gc, y.shape(), s);
  return mx::array(y.shape(), y.dtype(), std::make_shared<SoftmaxGrad>(s, axis),
                   {mx::contiguous(y, false, s), mx::contiguous(gc, false, s)});
}

int check_axis(const mx::array& x, int axis, const char* what) {
  const int nd = static_cast<int>(x.ndim());
  if (nd == 0 || axis < -nd || axis >= nd) {
    fail(what, "'axis' " + std::to_string(axis) + " is out of range for an array of " + std::to_string(nd) + " dims");
  }
  return axis < 0 ? axis + nd : axis;
}

mx::array softmax_op(const mx::array& x, int axis) {
  auto s = cpu_stream("softmax");
  const int a = check_axis(x, axis, "softmax");
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail("softmax", "x must be floating point");
  return mx::array(x.shape(), x.dtype(), std::make_shared<Softmax>(s, a), {mx::contiguous(x, false, s)});
}

mx::array softmax_grad_op(const mx::array& y, const mx::array& g, int axis) {
  auto s = cpu_stream("softmax_grad");
  const int a = check_axis(y, axis, "softmax_grad");
  if (!mx::issubdtype(y.dtype(), mx::floating)) fail("softmax_grad", "y must be floating point");
  return make_softmax_grad(s, a, y, g);
}

mx::array channel_affine_op(const mx::array& x, const mx::array& alpha, const mx::array& beta, bool relu) {
  auto s = cpu_stream("channel_affine");
  if (x.ndim() < 1) fail("channel_affine", "x must have a trailing channel axis");
  const int c = x.shape(-1);
  if (alpha.ndim() != 1 || beta.ndim() != 1 || alpha.shape(0) != c || beta.shape(0) != c) {
    fail("channel_affine", "alpha and beta must be (C,) for x's last axis");
  }
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail("channel_affine", "x must be floating point");
  return mx::array(x.shape(), x.dtype(), std::make_shared<ChannelAffine>(s, relu),
                   {mx::contiguous(x, false, s), mx::contiguous(mx::astype(alpha, mx::float32, s), false, s),
                    mx::contiguous(mx::astype(beta, mx::float32, s), false, s)});
}

// ------------------------------------------------------------------------------------------------ layer / group norm
// One primitive for both: groups == 0 is LayerNorm over the last axis, groups >= 1 GroupNorm over (N, *S, C).
// Inputs: x, then weight and bias if present (cast to the compute type: float32, float64 for float64 x).
// The gradient is NormGrad (dx, dweight, dbias), a native pass too; its own VJP (second derivatives) differentiates
// the same function written in MLX ops.
mx::Dtype norm_acc_dtype(mx::Dtype t) { return t == mx::float64 ? mx::float64 : mx::float32; }

// (N, S, C) of a norm's input: LayerNorm rows as N with S = 1, GroupNorm (N, *S, C).
std::array<int64_t, 3> norm_dims(const mx::array& x, int groups) {
  const int64_t C = x.shape(-1);
  const int64_t total = static_cast<int64_t>(x.size());
  if (groups == 0) return {C ? total / C : 0, 1, C};
  const int64_t N = x.shape(0);
  return {N, (N && C) ? total / (N * C) : 0, C};
}

// The same normalisation in MLX ops (compute type A), without the affine part: for second derivatives.
mx::array norm_reference(const mx::array& x, int groups, double eps, mx::Stream s) {
  if (groups == 0) {
    auto mean = mx::mean(x, -1, true, s);
    auto d = mx::subtract(x, mean, s);
    auto var = mx::mean(mx::square(d, s), -1, true, s);
    return mx::multiply(d, mx::rsqrt(mx::add(var, mx::array(eps, x.dtype()), s), s), s);
  }
  const int n = x.shape(0), c = x.shape(-1);
  auto g = mx::reshape(x, {n, -1, groups, c / groups}, s);
  auto mean = mx::mean(g, {1, 3}, true, s);
  auto d = mx::subtract(g, mean, s);
  auto var = mx::mean(mx::square(d, s), {1, 3}, true, s);
  return mx::reshape(mx::multiply(d, mx::rsqrt(mx::add(var, mx::array(eps, x.dtype()), s), s), s), x.shape(), s);
}

std::vector<mx::array> make_norm_grad(mx::Stream s, int groups, double eps, const mx::array& x, const mx::array& g,
                                      const std::optional<mx::array>& w);

class NormGrad : public mx::Primitive {
 public:
  NormGrad(mx::Stream s, int groups, double eps) : mx::Primitive(s), groups_(groups), eps_(eps) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [groups = groups_, eps = eps_](auto& in, auto& out) {
      auto [N, S, C] = norm_dims(in[0], groups);
      dispatch_float(in[0].dtype(), groups ? "group_norm_grad" : "layer_norm_grad", [&](auto tag) {
        using T = decltype(tag);
        using A = NormAcc<T>;
        const A* w = in.size() > 2 ? in[2].template data<A>() : nullptr;
        if (groups == 0) {
          layer_norm_grad<T>(in[0].template data<T>(), in[1].template data<T>(), N, C, w, static_cast<A>(eps),
                             out[0].template data<T>(), out[1].template data<A>(), out[2].template data<A>());
        } else {
          group_norm_grad<T>(in[0].template data<T>(), in[1].template data<T>(), N, S, C, groups, w,
                             static_cast<A>(eps), out[0].template data<T>(), out[1].template data<A>(),
                             out[2].template data<A>());
        }
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[porter.norm_grad] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return groups_ ? "PorterGroupNormGrad" : "PorterLayerNormGrad"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<NormGrad>(*this, other)) return false;
    const auto& o = static_cast<const NormGrad&>(other);
    return o.groups_ == groups_ && o.eps_ == eps_;
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>&,
                                                           const std::vector<int>&) override {
    fail("norm_grad", "vmap of a layer/group norm gradient (per-example weight gradients) is not supported");
  }
  // (dx, dw, db) as a function of (x, g, w), written in MLX ops and differentiated by MLX
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override {
    auto s = stream();
    const int groups = groups_;
    const double eps = eps_;
    const bool has_w = primals.size() > 2;
    const mx::Dtype xt = primals[0].dtype(), at = norm_acc_dtype(xt);
    const int c = primals[0].shape(-1);
    auto h = [=](const std::vector<mx::array>& in) {
      auto xa = mx::astype(in[0], at, s), ga = mx::astype(in[1], at, s);
      std::vector<mx::array> params{xa, has_w ? in[2] : mx::ones({c}, at, s), mx::zeros({c}, at, s)};
      auto f = [=](const std::vector<mx::array>& p) {
        return std::vector<mx::array>{mx::add(mx::multiply(norm_reference(p[0], groups, eps, s), p[1], s), p[2], s)};
      };
      auto grads = mx::vjp(f, params, {ga}).second;
      return std::vector<mx::array>{mx::astype(grads[0], xt, s), grads[1], grads[2]};
    };
    std::vector<mx::array> cots;
    for (size_t i = 0; i < outputs.size(); ++i) {
      cots.push_back(i < cotangents.size() ? cotangents[i] : mx::zeros_like(outputs[i], s));
    }
    auto grads = mx::vjp(h, primals, cots).second;
    std::vector<mx::array> out;
    for (int arg : argnums) out.push_back(grads[arg]);
    return out;
  }

 private:
  int groups_;
  double eps_;
};

class Norm : public mx::UnaryPrimitive {
 public:
  Norm(mx::Stream s, int groups, double eps, bool has_w, bool has_b)
      : mx::UnaryPrimitive(s), groups_(groups), eps_(eps), has_w_(has_w), has_b_(has_b) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [groups = groups_, eps = eps_, hw = has_w_, hb = has_b_](auto& in, auto& out) {
      auto [N, S, C] = norm_dims(in[0], groups);
      dispatch_float(in[0].dtype(), groups ? "group_norm" : "layer_norm", [&](auto tag) {
        using T = decltype(tag);
        using A = NormAcc<T>;
        const A* w = hw ? in[1].template data<A>() : nullptr;
        const A* b = hb ? in[hw ? 2 : 1].template data<A>() : nullptr;
        if (groups == 0) {
          layer_norm<T>(in[0].template data<T>(), N, C, w, b, static_cast<A>(eps), out[0].template data<T>());
        } else {
          group_norm<T>(in[0].template data<T>(), N, S, C, groups, w, b, static_cast<A>(eps),
                        out[0].template data<T>());
        }
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.norm] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return groups_ ? "PorterGroupNorm" : "PorterLayerNorm"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<Norm>(*this, other)) return false;
    const auto& o = static_cast<const Norm&>(other);
    return o.groups_ == groups_ && o.eps_ == eps_ && o.has_w_ == has_w_ && o.has_b_ == has_b_;
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    auto s = stream();
    for (size_t i = 1; i < axes.size(); ++i) {
      if (axes[i] >= 0) fail("norm", "vmap over the weight or bias is not supported");
    }
    if (groups_ == 0) {  // rows are independent: the mapped axis joins them (it must not be the normalised one)
      const int last = static_cast<int>(inputs[0].ndim()) - 1;
      mx::array x = axes[0] == last ? mx::moveaxis(inputs[0], last, 0, s) : inputs[0];
      std::vector<mx::array> in{mx::contiguous(x, false, s)};
      for (size_t i = 1; i < inputs.size(); ++i) in.push_back(inputs[i]);
      return {{mx::array(in[0].shape(), in[0].dtype(), std::make_shared<Norm>(s, 0, eps_, has_w_, has_b_), in)},
              {axes[0] == last ? 0 : axes[0]}};
    }
    std::vector<bool> batched(inputs.size(), false);
    batched[0] = true;
    auto build = [&](const std::vector<mx::array>& in) {
      std::vector<mx::array> ins{mx::contiguous(in[0], false, s)};
      for (size_t i = 1; i < in.size(); ++i) ins.push_back(in[i]);
      return std::vector<mx::array>{
          mx::array(in[0].shape(), in[0].dtype(), std::make_shared<Norm>(s, groups_, eps_, has_w_, has_b_), ins)};
    };
    return vmap_into_batch(s, "group_norm", inputs, axes, batched, build);
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    auto s = stream();
    std::optional<mx::array> w;
    if (has_w_) w = primals[1];
    auto grads = make_norm_grad(s, groups_, eps_, primals[0], cotangents[0], w);
    std::vector<mx::array> out;
    for (int arg : argnums) {
      if (arg == 0) {
        out.push_back(grads[0]);
      } else if (arg == 1 && has_w_) {
        out.push_back(grads[1]);
      } else {
        out.push_back(grads[2]);
      }
    }
    return out;
  }

 private:
  int groups_;
  double eps_;
  bool has_w_, has_b_;
};

std::vector<mx::array> make_norm_grad(mx::Stream s, int groups, double eps, const mx::array& x, const mx::array& g,
                                      const std::optional<mx::array>& w) {
  auto gc = cast_like(g, x, s);
  if (gc.shape() != x.shape()) gc = mx::broadcast_to(gc, x.shape(), s);
  std::vector<mx::array> in{x, mx::contiguous(gc, false, s)};
  if (w) in.push_back(*w);
  const mx::Dtype at = norm_acc_dtype(x.dtype());
  const int c = x.shape(-1);
  return mx::array::make_arrays({x.shape(), {c}, {c}}, {x.dtype(), at, at},
                                std::make_shared<NormGrad>(s, groups, eps), in);
}

mx::array norm_op(const mx::array& x, const std::optional<mx::array>& weight, const std::optional<mx::array>& bias,
                  int groups, double eps) {
  const char* what = groups ? "group_norm" : "layer_norm";
  auto s = cpu_stream(what);
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail(what, "x must be floating point");
  if (x.ndim() < (groups ? 2u : 1u)) fail(what, groups ? "x must be (N, *spatial, C)" : "x must have a last axis");
  const int c = x.shape(-1);
  if (groups < 0 || (groups && c % groups)) fail(what, "'groups' must divide the channel count");
  if (!(eps >= 0.0)) fail(what, "'eps' must be >= 0");
  const mx::Dtype at = norm_acc_dtype(x.dtype());
  std::vector<mx::array> in{mx::contiguous(x, false, s)};
  for (const auto* p : {&weight, &bias}) {
    if (!*p) continue;
    if ((*p)->ndim() != 1 || (*p)->shape(0) != c) fail(what, "weight and bias must be (C,) for x's last axis");
    in.push_back(mx::contiguous(mx::astype(**p, at, s), false, s));
  }
  return mx::array(x.shape(), x.dtype(), std::make_shared<Norm>(s, groups, eps, weight.has_value(), bias.has_value()),
                   in);
}

std::vector<mx::array> norm_grad_op(const mx::array& x, const mx::array& g, const std::optional<mx::array>& weight,
                                    int groups, double eps) {
  auto s = cpu_stream("norm_grad");
  std::optional<mx::array> w;
  if (weight) w = mx::contiguous(mx::astype(*weight, norm_acc_dtype(x.dtype()), s), false, s);
  return make_norm_grad(s, groups, eps, mx::contiguous(x, false, s), g, w);
}

mx::array make_window_max_grad(mx::Stream s, const std::vector<Axis>& axes, const mx::array& x, const mx::array& g);
mx::array make_window_sum(mx::Stream s, const std::vector<Axis>& axes, int64_t ov, bool seq, bool grad,
                          const mx::Shape& shape, const mx::array& in, const mx::Shape& plane);
mx::array make_scatter_add(mx::Stream s, const mx::Shape& shape, const mx::array& src, const mx::array& index);
mx::array make_gather(mx::Stream s, const mx::array& src, const mx::array& index);

class WindowMax : public mx::Primitive {
 public:
  WindowMax(mx::Stream s, std::vector<Axis> axes, bool with_indices)
      : mx::Primitive(s), axes_(std::move(axes)), with_indices_(with_indices) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [axes = axes_, wi = with_indices_](auto& in, auto& out) {
      Geometry g = Geometry::of(in[0]);
      dispatch(in[0].dtype(), "window_max", [&](auto tag) {
        using T = decltype(tag);
        window_max<T>(in[0].template data<T>(), g, axes, out[0].template data<T>(),
                      wi ? out[1].template data<int64_t>() : nullptr);
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[porter.window_max] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return "PorterWindowMax"; }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "window_max", inputs, axes, {true}, [&](const std::vector<mx::array>& in) {
      auto shape = window_out_shape(in[0], axes_);
      std::vector<mx::Shape> shapes{shape};
      std::vector<mx::Dtype> dtypes{in[0].dtype()};
      if (with_indices_) {
        shapes.push_back(shape);
        dtypes.push_back(mx::int64);
      }
      return mx::array::make_arrays(shapes, dtypes, std::make_shared<WindowMax>(stream(), axes_, with_indices_), in);
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    // torch's gradient: all of each output's gradient to the tap the scan chose (recomputed from x)
    const auto& x = primals[0];
    return {make_window_max_grad(stream(), axes_, x, cast_like(cotangents[0], x, stream()))};
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<WindowMax>(*this, other)) return false;
    auto& o = static_cast<const WindowMax&>(other);
    return axes_ == o.axes_ && with_indices_ == o.with_indices_;
  }

 private:
  std::vector<Axis> axes_;
  bool with_indices_;
};

class WindowMaxGrad : public mx::Primitive {
 public:
  WindowMaxGrad(mx::Stream s, std::vector<Axis> axes) : mx::Primitive(s), axes_(std::move(axes)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [axes = axes_](auto& in, auto& out) {
      Geometry g = Geometry::of(in[0]);
      dispatch(in[0].dtype(), "window_max_grad", [&](auto tag) {
        using T = decltype(tag);
        window_max_grad<T>(in[0].template data<T>(), g, axes, in[1].template data<T>(), out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[porter.window_max_grad] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return "PorterWindowMaxGrad"; }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "window_max", inputs, axes, {true, true}, [&](const std::vector<mx::array>& in) {
      return std::vector<mx::array>{
          mx::array(in[0].shape(), in[0].dtype(), std::make_shared<WindowMaxGrad>(stream(), axes_), in)};
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>&, const std::vector<mx::array>&, const std::vector<int>&,
                             const std::vector<mx::array>&) override {
    throw std::invalid_argument("[porter.window_max] second derivatives of max pooling are not supported");
  }

 private:
  std::vector<Axis> axes_;
};

class FractionalMax : public mx::Primitive {
 public:
  FractionalMax(mx::Stream s, Ints kernel, Ints out, Ints column)
      : mx::Primitive(s), kernel_(std::move(kernel)), out_(std::move(out)), column_(std::move(column)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [k = kernel_, o = out_, col = column_](auto& in, auto& out) {
      Geometry g = Geometry::of(in[0]);
      const int nd = static_cast<int>(k.size());
      int64_t kernel[3] = {1, 1, 1}, size[3] = {1, 1, 1}, column[3] = {0, 0, 0};
      for (int d = 0; d < nd; ++d) {
        kernel[3 - nd + d] = k[d];
        size[3 - nd + d] = o[d];
        column[3 - nd + d] = col[d];
      }
      dispatch_float(in[0].dtype(), "fractional_max", [&](auto tag) {
        using T = decltype(tag);
        fractional_max<T>(in[0].template data<T>(), g, in[1].template data<T>(), column, nd, size, kernel,
                          out[0].template data<T>(), out[1].template data<int64_t>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[porter.fractional_max] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return "PorterFractionalMax"; }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "fractional_max", inputs, axes, {true, true},
                           [&](const std::vector<mx::array>& in) {
      mx::Shape shape = in[0].shape();
      for (size_t d = 0; d < out_.size(); ++d) shape[1 + d] = static_cast<int>(out_[d]);
      return mx::array::make_arrays({shape, shape}, {in[0].dtype(), mx::int64},
                                    std::make_shared<FractionalMax>(stream(), kernel_, out_, column_),
                                    {in[0], mx::contiguous(in[1], false, stream())});
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override {
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (arg == 0) {  // to each output's index; the samples get none (they only place the windows)
        const auto& x = primals[0];
        grads.push_back(make_scatter_add(stream(), x.shape(), cast_like(cotangents[0], x, stream()), outputs[1]));
      } else {
        grads.push_back(mx::zeros_like(primals[arg], stream()));
      }
    }
    return grads;
  }

 private:
  Ints kernel_, out_, column_;
};

class WindowSum : public mx::Primitive {
 public:
  // plane: the spatial extents of the forward's input (the adjoint's output)
  // power (forward only): sum x ** power over each window (LP pooling), 1 for a plain sum
  WindowSum(mx::Stream s, std::vector<Axis> axes, int64_t override_div, bool sequential, bool grad, mx::Shape plane,
            double power = 1.0)
      : mx::Primitive(s),
        axes_(std::move(axes)),
        override_(override_div),
        sequential_(sequential),
        grad_(grad),
        plane_(std::move(plane)),
        power_(power) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs,
           [axes = axes_, ov = override_, seq = sequential_, grad = grad_, power = power_](auto& in, auto& out) {
             dispatch_float(in[0].dtype(), grad ? "window_sum_grad" : "window_sum", [&](auto tag) {
               using T = decltype(tag);
               if (grad) {
                 window_sum_grad<T>(in[0].template data<T>(), Geometry::of(out[0]), axes, ov, seq,
                                    out[0].template data<T>());
               } else {
                 window_sum<T>(in[0].template data<T>(), Geometry::of(in[0]), axes, ov, seq,
                               out[0].template data<T>(), power);
               }
             });
           });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[porter.window_sum] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return grad_ ? "PorterWindowSumGrad" : "PorterWindowSum"; }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "window_sum", inputs, axes, {true}, [&](const std::vector<mx::array>& in) {
      mx::Shape shape = in[0].shape();
      const size_t nd = shape.size() - 2;
      for (size_t d = 0; d < nd; ++d) {  // forward: window outputs; adjoint: back to the input extents
        shape[1 + d] = grad_ ? plane_[d] : static_cast<int>(axes_[3 - nd + d].out());
      }
      auto input = grad_ ? mx::contiguous(in[0], false, stream()) : in[0];
      return std::vector<mx::array>{mx::array(
          shape, in[0].dtype(),
          std::make_shared<WindowSum>(stream(), axes_, override_, sequential_, grad_, plane_, power_), {input})};
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>&) override {
    // linear: the adjoint of the window average is its scatter, and the adjoint of that the average again
    const auto& in = primals[0];
    auto g = make_window_sum(stream(), axes_, override_, sequential_, !grad_, in.shape(),
                             cast_like(cotangents[0], in, stream()), plane_);
    if (power_ == 1.0) return {g};
    // x ** p inside: torch's pow backward, grad * (p * x ** (p - 1)), with the same shortcuts as the forward
    return {mx::multiply(g, mx::multiply(mx::array(power_, in.dtype()), power_of(in, power_ - 1.0, stream()),
                                         stream()), stream())};
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<WindowSum>(*this, other)) return false;
    auto& o = static_cast<const WindowSum&>(other);
    return axes_ == o.axes_ && override_ == o.override_ && sequential_ == o.sequential_ && grad_ == o.grad_ &&
           plane_ == o.plane_ && power_ == o.power_;
  }

 private:
  std::vector<Axis> axes_;
  int64_t override_;
  bool sequential_, grad_;
  mx::Shape plane_;
  double power_;
};

class PlaneScatter : public mx::Primitive {
 public:
  // dims: the spatial extents of the output plane
  PlaneScatter(mx::Stream s, mx::Shape dims, bool assign)
      : mx::Primitive(s), dims_(std::move(dims)), plane_(1), assign_(assign) {
    for (int d : dims_) plane_ *= d;
  }

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [plane = plane_, assign = assign_](auto& in, auto& out) {
      const auto& src = in[0];
      const int64_t n = src.shape(0), c = src.shape(-1), positions = src.size() / std::max<int64_t>(1, n * c);
      dispatch(src.dtype(), "plane_scatter", [&](auto tag) {
        using T = decltype(tag);
        int64_t bad = plane_scatter<T>(src.template data<T>(), in[1].template data<int64_t>(), n, positions, c,
                                       plane, assign, out[0].template data<T>());
        if (out.size() > 1) *out[1].template data<int64_t>() = bad;
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[porter.plane_scatter] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return assign_ ? "PorterPlaneAssign" : "PorterPlaneScatterAdd"; }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "plane_scatter", inputs, axes, {true, true},
                           [&](const std::vector<mx::array>& in) {
      mx::Shape shape{in[0].shape(0)};
      shape.insert(shape.end(), dims_.begin(), dims_.end());
      shape.push_back(in[0].shape(-1));
      std::vector<mx::Shape> shapes{shape};
      std::vector<mx::Dtype> dtypes{in[0].dtype()};
      if (assign_) {
        shapes.push_back({});
        dtypes.push_back(mx::int64);
      }
      return mx::array::make_arrays(shapes, dtypes, std::make_shared<PlaneScatter>(stream(), dims_, assign_),
                                    {mx::contiguous(in[0], false, stream()), mx::contiguous(in[1], false, stream())});
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    // torch's unpool backward gathers at every index, duplicates included (each gets the full gradient)
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (arg == 0) {
        grads.push_back(make_gather(stream(), cast_like(cotangents[0], primals[0], stream()), primals[1]));
      } else {
        grads.push_back(mx::zeros_like(primals[arg], stream()));
      }
    }
    return grads;
  }

 private:
  mx::Shape dims_;
  int64_t plane_;
  bool assign_;
};

class PlaneGather : public mx::Primitive {
 public:
  PlaneGather(mx::Stream s, int64_t plane) : mx::Primitive(s), plane_(plane) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [plane = plane_](auto& in, auto& out) {
      const auto& idx = in[1];
      const int64_t n = idx.shape(0), c = idx.shape(-1), positions = idx.size() / std::max<int64_t>(1, n * c);
      dispatch(in[0].dtype(), "plane_gather", [&](auto tag) {
        using T = decltype(tag);
        plane_gather<T>(in[0].template data<T>(), idx.template data<int64_t>(), n, positions, c, plane,
                        out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[porter.plane_gather] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return "PorterPlaneGather"; }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "plane_gather", inputs, axes, {true, true}, [&](const std::vector<mx::array>& in) {
      return std::vector<mx::array>{
          mx::array(in[1].shape(), in[0].dtype(), std::make_shared<PlaneGather>(stream(), plane_), in)};
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (arg == 0) {
        const auto& src = primals[0];
        grads.push_back(make_scatter_add(stream(), src.shape(), cast_like(cotangents[0], src, stream()), primals[1]));
      } else {
        grads.push_back(mx::zeros_like(primals[arg], stream()));
      }
    }
    return grads;
  }

 private:
  int64_t plane_;
};

// ------------------------------------------------------------------------------------------------ depthwise conv
// One primitive for the three depthwise kernels (conv_kernels.h), in float32 or float64:
//   forward:      (x (N, *L, C), w (C*m, *k, 1)) -> y (N, *O, C*m)
//   input_grad:   (gy (N, *O, m*C) in (m, C) order, w) -> dx (N, *L, C)
//   weight_grad:  (x, gy in (m, C) order) -> dw (C*m, *k, 1)
enum class DwKind { forward, input_grad, weight_grad };

struct DwParams {
  Ints kernel, stride, dilation, lo;
  Ints extent, out;  // the spatial extents of the input and of the output
  int64_t mult = 1;
  bool operator==(const DwParams& o) const {
    return kernel == o.kernel && stride == o.stride && dilation == o.dilation && lo == o.lo && extent == o.extent &&
           out == o.out && mult == o.mult;
  }
};

// The geometry of a depthwise conv from its (batched, channels-last) input and output shapes.
DwGeometry dw_geometry(const DwParams& p, const mx::Shape& in, const mx::Shape& out) {
  DwGeometry g;
  const int nd = static_cast<int>(p.kernel.size());
  g.n = in[0];
  g.c = in.back();
  g.m = p.mult;
  for (int d = 0; d < nd; ++d) {
    const int at = 3 - nd + d;
    g.L[at] = in[1 + d];
    g.O[at] = out[1 + d];
    g.k[at] = p.kernel[d];
    g.s[at] = p.stride[d];
    g.d[at] = p.dilation[d];
    g.lo[at] = p.lo[d];
  }
  return g;
}

// The output gradient in the kernels' (N, *O, m, C) channel order (a copy only when m > 1).
mx::array dw_grad_layout(const mx::array& gy, int64_t mult, mx::Stream s) {
  if (mult == 1) return mx::contiguous(gy, false, s);
  mx::Shape split = gy.shape();
  const int c = static_cast<int>(split.back() / mult);
  split.back() = c;
  split.push_back(static_cast<int>(mult));
  auto t = mx::swapaxes(mx::reshape(gy, split, s), -1, -2, s);
  return mx::reshape(mx::contiguous(t, false, s), gy.shape(), s);
}

class DepthwiseConv : public mx::Primitive {
 public:
  DepthwiseConv(mx::Stream s, DwParams params, DwKind kind)
      : mx::Primitive(s), params_(std::move(params)), kind_(kind) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [p = params_, kind = kind_](auto& in, auto& out) {
      const mx::Shape& x_shape = kind == DwKind::input_grad ? out[0].shape() : in[0].shape();
      const mx::Shape& y_shape =
          kind == DwKind::forward ? out[0].shape() : in[kind == DwKind::input_grad ? 0 : 1].shape();
      const DwGeometry g = dw_geometry(p, x_shape, y_shape);
      auto run = [&](auto tag) {
        using T = decltype(tag);
        switch (kind) {
          case DwKind::forward:
            depthwise_forward<T>(in[0].template data<T>(), in[1].template data<T>(), g, out[0].template data<T>());
            break;
          case DwKind::input_grad:
            depthwise_input_grad<T>(in[0].template data<T>(), in[1].template data<T>(), g,
                                    out[0].template data<T>());
            break;
          case DwKind::weight_grad:
            depthwise_weight_grad<T>(in[0].template data<T>(), in[1].template data<T>(), g,
                                     out[0].template data<T>());
            break;
        }
      };
      if (in[0].dtype() == mx::float32) {
        run(float{});
      } else if (in[0].dtype() == mx::float64) {
        run(double{});
      } else {
        throw std::invalid_argument("[porter.depthwise_conv] the kernels run in float32 or float64");
      }
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[porter.depthwise_conv] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override {
    switch (kind_) {
      case DwKind::input_grad: return "PorterDepthwiseConvInputGrad";
      case DwKind::weight_grad: return "PorterDepthwiseConvWeightGrad";
      default: return "PorterDepthwiseConv";
    }
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    // All three are bilinear, and each one's adjoints are the other two (so second derivatives work too).
    auto s = stream();
    auto make = [&](DwKind kind, const mx::array& like, std::vector<mx::array> in) {
      return mx::array(like.shape(), like.dtype(), std::make_shared<DepthwiseConv>(s, params_, kind), std::move(in));
    };
    auto forward_in_grad_layout = [&](const mx::array& x, const mx::array& w, const mx::array& gy_like) {
      return dw_grad_layout(make(DwKind::forward, gy_like, {x, w}), params_.mult, s);
    };
    const auto& a = primals[0];
    const auto& b = primals[1];
    auto ct = mx::contiguous(cast_like(cotangents[0], a, s), false, s);
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      switch (kind_) {
        case DwKind::forward: {  // (x, w): gy -> dx, dw
          auto gy = dw_grad_layout(ct, params_.mult, s);
          grads.push_back(arg == 0 ? make(DwKind::input_grad, a, {gy, b}) : make(DwKind::weight_grad, b, {a, gy}));
          break;
        }
        case DwKind::input_grad:  // (gy, w): v (like x) -> forward(v, w) in gy's order, weight_grad(v, gy)
          grads.push_back(arg == 0 ? forward_in_grad_layout(ct, b, a) : make(DwKind::weight_grad, b, {ct, a}));
          break;
        case DwKind::weight_grad:  // (x, gy): v (like w) -> input_grad(gy, v), forward(x, v) in gy's order
          grads.push_back(arg == 0 ? make(DwKind::input_grad, a, {b, ct}) : forward_in_grad_layout(a, ct, b));
          break;
      }
    }
    return grads;
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    // forward and input gradient are per example (the weight is shared); per-example weight gradients are not
    if (kind_ == DwKind::weight_grad) {
      fail("depthwise_conv", "vmap over the weight gradient (per-example weight gradients) is not supported");
    }
    return vmap_into_batch(stream(), "depthwise_conv", inputs, axes, {true, false},
                           [&](const std::vector<mx::array>& in) {
                             const bool fwd = kind_ == DwKind::forward;
                             mx::Shape shape{in[0].shape(0)};
                             for (int64_t e : fwd ? params_.out : params_.extent) shape.push_back(static_cast<int>(e));
                             shape.push_back(fwd ? in[1].shape(0) : static_cast<int>(in[1].shape(0) / params_.mult));
                             return std::vector<mx::array>{mx::array(
                                 shape, in[0].dtype(), std::make_shared<DepthwiseConv>(stream(), params_, kind_),
                                 {mx::contiguous(in[0], false, stream()), in[1]})};
                           });
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<DepthwiseConv>(*this, other)) return false;
    auto& o = static_cast<const DepthwiseConv&>(other);
    return params_ == o.params_ && kind_ == o.kind_;
  }

 private:
  DwParams params_;
  DwKind kind_;
};

mx::array make_window_max_grad(mx::Stream s, const std::vector<Axis>& axes, const mx::array& x, const mx::array& g) {
  return mx::array(x.shape(), x.dtype(), std::make_shared<WindowMaxGrad>(s, axes), {x, mx::contiguous(g, false, s)});
}

mx::array make_window_sum(mx::Stream s, const std::vector<Axis>& axes, int64_t ov, bool seq, bool grad,
                          const mx::Shape& shape, const mx::array& in, const mx::Shape& plane) {
  return mx::array(shape, in.dtype(), std::make_shared<WindowSum>(s, axes, ov, seq, grad, plane),
                   {grad ? mx::contiguous(in, false, s) : in});
}

mx::array make_scatter_add(mx::Stream s, const mx::Shape& shape, const mx::array& src, const mx::array& index) {
  mx::Shape dims(shape.begin() + 1, shape.end() - 1);
  return mx::array(shape, src.dtype(), std::make_shared<PlaneScatter>(s, dims, false),
                   {mx::contiguous(src, false, s), mx::contiguous(mx::astype(index, mx::int64, s), false, s)});
}

mx::array make_gather(mx::Stream s, const mx::array& src, const mx::array& index) {
  int64_t plane = 1;
  for (size_t d = 1; d + 1 < src.ndim(); ++d) plane *= src.shape(d);
  return mx::array(index.shape(), src.dtype(), std::make_shared<PlaneGather>(s, plane),
                   {mx::contiguous(src, false, s), mx::contiguous(mx::astype(index, mx::int64, s), false, s)});
}

// ------------------------------------------------------------------------------------------------ ops
std::vector<mx::array> window_max_op(const mx::array& x, const Table& first, const Table& end, const Ints& step,
                                     bool with_indices) {
  auto s = cpu_stream("window_max");
  check_batched(x, "window_max", "x");
  auto axes = make_axes("window_max", first, end, step, {}, x.shape());
  Ints out;
  for (size_t d = 3 - first.size(); d < 3; ++d) out.push_back(axes[d].out());
  auto shape = out_shape(x, out);
  std::vector<mx::Shape> shapes{shape};
  std::vector<mx::Dtype> dtypes{x.dtype()};
  if (with_indices) {
    shapes.push_back(shape);
    dtypes.push_back(mx::int64);
  }
  return mx::array::make_arrays(shapes, dtypes, std::make_shared<WindowMax>(s, std::move(axes), with_indices), {x});
}

// samples: (N, C, nd) in x's dtype (torch's random_samples); column[d]: the sample column of spatial dim d.
std::vector<mx::array> fractional_max_op(const mx::array& x, const mx::array& samples, const Ints& kernel,
                                         const Ints& out, const Ints& column) {
  auto s = cpu_stream("fractional_max");
  check_batched(x, "fractional_max", "x");
  const size_t nd = x.ndim() - 2;
  if (kernel.size() != nd || out.size() != nd || column.size() != nd) {
    fail("fractional_max", "kernel, out and column must give one entry per spatial dim of the input");
  }
  if (samples.ndim() != 3 || samples.shape(0) != x.shape(0) || samples.shape(1) != x.shape(-1) ||
      samples.shape(2) != static_cast<int>(nd) || samples.dtype() != x.dtype()) {
    fail("fractional_max", "samples must be (N, C, nd) in the input's dtype");
  }
  int64_t plane = 1;
  for (size_t d = 0; d < nd; ++d) plane *= x.shape(1 + d);
  if (plane >= (int64_t{1} << 31)) fail("fractional_max", "planes of 2**31 elements or more are not supported");
  for (size_t d = 0; d < nd; ++d) {
    if (kernel[d] <= 0 || kernel[d] > x.shape(1 + d)) fail("fractional_max", "kernel must fit the input");
    if (out[d] <= 0) fail("fractional_max", "out sizes must be positive");
    if (column[d] < 0 || column[d] >= static_cast<int64_t>(nd)) fail("fractional_max", "column out of range");
  }
  auto shape = out_shape(x, out);
  return mx::array::make_arrays({shape, shape}, {x.dtype(), mx::int64},
                                std::make_shared<FractionalMax>(s, kernel, out, column),
                                {x, mx::contiguous(samples, false, s)});
}

mx::array window_max_grad_op(const mx::array& x, const mx::array& grad, const Table& first, const Table& end,
                             const Ints& step) {
  auto s = cpu_stream("window_max_grad");
  check_batched(x, "window_max_grad", "x");
  auto axes = make_axes("window_max_grad", first, end, step, {}, x.shape());
  if (grad.ndim() != x.ndim() || grad.shape(0) != x.shape(0) || grad.shape(-1) != x.shape(-1) ||
      grad.dtype() != x.dtype()) {
    fail("window_max_grad", "grad must be (N, *out, C) in the dtype of x");
  }
  for (size_t d = 0; d + 2 < x.ndim(); ++d) {
    if (axes[3 - (x.ndim() - 2) + d].out() != grad.shape(1 + d)) {
      fail("window_max_grad", "window tables do not match the gradient's shape");
    }
  }
  return mx::array(x.shape(), x.dtype(), std::make_shared<WindowMaxGrad>(s, std::move(axes)),
                   {x, mx::contiguous(grad, false, s)});
}

mx::array window_sum_op(const mx::array& x, const Table& first, const Table& end, const Table& divisor,
                        int64_t override_div, bool sequential, double power) {
  if (power != 1.0 && x.dtype() != mx::float32 && x.dtype() != mx::float64) {
    fail("window_sum", "power sums are float32/float64 only (fp16/bf16 round between torch's stages)");
  }
  auto s = cpu_stream("window_sum");
  check_batched(x, "window_sum", "x");
  Ints step(first.size(), 1);
  auto axes = make_axes("window_sum", first, end, step, divisor, x.shape());
  Ints out;
  for (size_t d = 3 - first.size(); d < 3; ++d) out.push_back(axes[d].out());
  mx::Shape plane(x.shape().begin() + 1, x.shape().end() - 1);
  return mx::array(out_shape(x, out), x.dtype(),
                   std::make_shared<WindowSum>(s, std::move(axes), override_div, sequential, false, plane, power),
                   {x});
}

mx::array window_sum_grad_op(const mx::array& grad, const Ints& plane, const Table& first, const Table& end,
                             const Table& divisor, int64_t override_div, bool sequential) {
  auto s = cpu_stream("window_sum_grad");
  check_batched(grad, "window_sum_grad", "grad");
  if (plane.size() != grad.ndim() - 2) fail("window_sum_grad", "plane must give one extent per spatial dim");
  mx::Shape in_shape{grad.shape(0)};
  for (int64_t p : plane) in_shape.push_back(static_cast<int>(p));
  in_shape.push_back(grad.shape(-1));
  Ints step(first.size(), 1);
  auto axes = make_axes("window_sum_grad", first, end, step, divisor, in_shape);
  for (size_t d = 0; d < plane.size(); ++d) {
    if (axes[3 - plane.size() + d].out() != grad.shape(1 + d)) {
      fail("window_sum_grad", "window tables do not match the gradient's shape");
    }
  }
  mx::Shape plane_shape(in_shape.begin() + 1, in_shape.end() - 1);
  return mx::array(in_shape, grad.dtype(),
                   std::make_shared<WindowSum>(s, std::move(axes), override_div, sequential, true, plane_shape),
                   {mx::contiguous(grad, false, s)});
}

// With `assign` (max unpool), also returns the number of out-of-range indices (skipped) as an int64 scalar.
std::vector<mx::array> plane_scatter_op(const mx::array& src, const mx::array& index, const Ints& plane,
                                        bool assign) {
  auto s = cpu_stream("plane_scatter");
  check_batched(src, "plane_scatter", "src");
  if (index.shape() != src.shape()) fail("plane_scatter", "index must have the shape of src");
  mx::Shape shape{src.shape(0)};
  int64_t flat = 1;
  for (int64_t p : plane) {
    if (p <= 0) fail("plane_scatter", "plane extents must be positive");
    shape.push_back(static_cast<int>(p));
    flat *= p;
  }
  shape.push_back(src.shape(-1));
  std::vector<mx::Shape> shapes{shape};
  std::vector<mx::Dtype> dtypes{src.dtype()};
  if (assign) {
    shapes.push_back({});
    dtypes.push_back(mx::int64);
  }
  return mx::array::make_arrays(
      shapes, dtypes, std::make_shared<PlaneScatter>(s, mx::Shape(shape.begin() + 1, shape.end() - 1), assign),
      {mx::contiguous(src, false, s), mx::contiguous(mx::astype(index, mx::int64, s), false, s)});
}

mx::array plane_gather_op(const mx::array& src, const mx::array& index) {
  auto s = cpu_stream("plane_gather");
  check_batched(src, "plane_gather", "src");
  check_batched(index, "plane_gather", "index");
  if (index.shape(0) != src.shape(0) || index.shape(-1) != src.shape(-1)) {
    fail("plane_gather", "index and src must share N and C");
  }
  int64_t flat = 1;
  for (size_t d = 1; d + 1 < src.ndim(); ++d) flat *= src.shape(d);
  return mx::array(index.shape(), src.dtype(), std::make_shared<PlaneGather>(s, flat),
                   {mx::contiguous(src, false, s), mx::contiguous(mx::astype(index, mx::int64, s), false, s)});
}

// Depthwise conv of batched channels-last x (N, *L, C) with w (C*m, *k, 1): zero padding lo/hi per dim, stride,
// dilation. float16/bfloat16 run in float32 (the sums accumulate in float32) and are rounded once at the end.
// ------------------------------------------------------------------------------------------------ grouped conv
// Grouped (non-depthwise) conv (grouped_conv_kernels.h), one primitive for three bilinear loop nests, each the
// others' adjoint (as DepthwiseConv), in float32 or float64:
//   forward:      (x (N, *L, C), w (C_out, *k, C/groups)) -> y (N, *O, C_out)
//   input_grad:   (gy (N, *O, C_out), w) -> dx (N, *L, C)
//   weight_grad:  (x, gy) -> dw (C_out, *k, C/groups)
class GroupedConv : public mx::UnaryPrimitive {
 public:
  GroupedConv(mx::Stream s, DwParams p, int64_t groups, DwKind kind)
      : mx::UnaryPrimitive(s), p_(std::move(p)), groups_(groups), kind_(kind) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [p = p_, groups = groups_, kind = kind_](auto& in, auto& out) {
      const mx::Shape& xs = kind == DwKind::input_grad ? out[0].shape() : in[0].shape();
      const mx::Shape& ys = kind == DwKind::forward ? out[0].shape() : in[kind == DwKind::input_grad ? 0 : 1].shape();
      const DwGeometry g = dw_geometry(p, xs, ys);
      const int64_t cout = ys.back();
      dispatch_float(in[0].dtype(), "grouped_conv", [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
          const T* a = in[0].template data<T>();
          const T* b = in[1].template data<T>();
          T* o = out[0].template data<T>();
          if (kind == DwKind::forward) grouped_conv<T>(a, b, g, groups, cout, o);
          else if (kind == DwKind::input_grad) grouped_conv_input_grad<T>(a, b, g, groups, cout, o);
          else grouped_conv_weight_grad<T>(a, b, g, groups, cout, o);
        } else {
          throw std::invalid_argument("[porter.grouped_conv] float32 or float64 only");
        }
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.grouped_conv] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override {
    return kind_ == DwKind::forward ? "PorterGroupedConv"
                                    : (kind_ == DwKind::input_grad ? "PorterGroupedConvInputGrad"
                                                                   : "PorterGroupedConvWeightGrad");
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<GroupedConv>(*this, other)) return false;
    auto& o = static_cast<const GroupedConv&>(other);
    return p_ == o.p_ && groups_ == o.groups_ && kind_ == o.kind_;
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    if (kind_ == DwKind::weight_grad) {
      fail("grouped_conv", "vmap over the weight gradient (per-example weight gradients) is not supported");
    }
    return vmap_into_batch(stream(), "grouped_conv", inputs, axes, {true, false},
                           [&](const std::vector<mx::array>& in) {
                             const bool fwd = kind_ == DwKind::forward;
                             mx::Shape shape{in[0].shape(0)};
                             for (int64_t e : fwd ? p_.out : p_.extent) shape.push_back(static_cast<int>(e));
                             shape.push_back(fwd ? in[1].shape(0) : static_cast<int>(in[1].shape(-1) * groups_));
                             return std::vector<mx::array>{
                                 mx::array(shape, in[0].dtype(), std::make_shared<GroupedConv>(stream(), p_, groups_, kind_),
                                           {mx::contiguous(in[0], false, stream()), in[1]})};
                           });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    auto s = stream();
    const auto& c = cast_like(cotangents[0], primals[0], s);
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (kind_ == DwKind::forward) {  // y = F(x, w): dx = I(c, w), dw = W(x, c)
        grads.push_back(arg == 0 ? make(DwKind::input_grad, c, primals[1], primals[0].shape())
                                 : make(DwKind::weight_grad, primals[0], c, primals[1].shape()));
      } else if (kind_ == DwKind::input_grad) {  // dx = I(gy, w): d/dgy = F(c, w), d/dw = W(c, gy)
        grads.push_back(arg == 0 ? make(DwKind::forward, c, primals[1], primals[0].shape())
                                 : make(DwKind::weight_grad, c, primals[0], primals[1].shape()));
      } else {  // dw = W(x, gy): d/dx = I(gy, c), d/dgy = F(x, c)
        grads.push_back(arg == 0 ? make(DwKind::input_grad, primals[1], c, primals[0].shape())
                                 : make(DwKind::forward, primals[0], c, primals[1].shape()));
      }
    }
    return grads;
  }

 private:
  mx::array make(DwKind kind, const mx::array& a, const mx::array& b, const mx::Shape& shape) {
    auto s = stream();
    return mx::array(shape, a.dtype(), std::make_shared<GroupedConv>(s, p_, groups_, kind),
                     {mx::contiguous(a, false, s), mx::contiguous(cast_like(b, a, s), false, s)});
  }
  DwParams p_;
  int64_t groups_;
  DwKind kind_;
};

mx::array grouped_conv_op(const mx::array& x, const mx::array& w, const Ints& stride, const Ints& lo, const Ints& hi,
                          const Ints& dilation, int64_t groups) {
  auto s = cpu_stream("grouped_conv");
  check_batched(x, "grouped_conv", "x");
  const size_t nd = x.ndim() - 2;
  if (w.ndim() != x.ndim()) fail("grouped_conv", "w must be (C_out, *kernel, C_in/groups)");
  if (stride.size() != nd || lo.size() != nd || hi.size() != nd || dilation.size() != nd) {
    fail("grouped_conv", "stride, lo, hi and dilation must give one entry per spatial dim of the input");
  }
  if (groups < 1 || x.shape(-1) != w.shape(-1) * groups || w.shape(0) % groups != 0 || w.shape(0) == 0) {
    fail("grouped_conv", "groups must divide C_out, and C_in must be groups * w.shape[-1]");
  }
  if (x.dtype() != w.dtype() || (x.dtype() != mx::float32 && x.dtype() != mx::float64)) {
    fail("grouped_conv", "x and w must both be float32 or both float64");
  }
  DwParams p;
  Ints out;
  for (size_t d = 0; d < nd; ++d) {
    const int64_t k = w.shape(1 + d);
    if (k <= 0 || stride[d] <= 0 || dilation[d] <= 0 || lo[d] < 0 || hi[d] < 0) {
      fail("grouped_conv", "kernel, stride and dilation must be positive and padding non-negative");
    }
    const int64_t span = x.shape(1 + d) + lo[d] + hi[d] - dilation[d] * (k - 1) - 1;
    if (span < 0) fail("grouped_conv", "the kernel is larger than the padded input");
    out.push_back(span / stride[d] + 1);
    p.kernel.push_back(k);
    p.extent.push_back(x.shape(1 + d));
  }
  p.stride = stride;
  p.dilation = dilation;
  p.lo = lo;
  p.out = out;
  mx::Shape shape{x.shape(0)};
  for (int64_t o : out) shape.push_back(static_cast<int>(o));
  shape.push_back(w.shape(0));
  return mx::array(shape, x.dtype(), std::make_shared<GroupedConv>(s, std::move(p), groups, DwKind::forward),
                   {mx::contiguous(x, false, s), mx::contiguous(w, false, s)});
}

mx::array depthwise_conv_op(const mx::array& x, const mx::array& w, const Ints& stride, const Ints& lo,
                            const Ints& hi, const Ints& dilation) {
  auto s = cpu_stream("depthwise_conv");
  check_batched(x, "depthwise_conv", "x");
  const size_t nd = x.ndim() - 2;
  if (w.ndim() != x.ndim() || w.shape(-1) != 1) fail("depthwise_conv", "w must be (C*m, *kernel, 1)");
  if (stride.size() != nd || lo.size() != nd || hi.size() != nd || dilation.size() != nd) {
    fail("depthwise_conv", "stride, lo, hi and dilation must give one entry per spatial dim of the input");
  }
  const int64_t c = x.shape(-1);
  if (c <= 0 || w.shape(0) % c != 0 || w.shape(0) == 0) fail("depthwise_conv", "w's C_out must be a multiple of C");
  if (x.dtype() != w.dtype()) fail("depthwise_conv", "x and w must have the same dtype");
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail("depthwise_conv", "x must be floating point");
  DwParams p;
  p.mult = w.shape(0) / c;
  Ints out;
  for (size_t d = 0; d < nd; ++d) {
    const int64_t k = w.shape(1 + d);
    if (k <= 0 || stride[d] <= 0 || dilation[d] <= 0 || lo[d] < 0 || hi[d] < 0) {
      fail("depthwise_conv", "kernel, stride and dilation must be positive and padding non-negative");
    }
    const int64_t span = x.shape(1 + d) + lo[d] + hi[d] - dilation[d] * (k - 1) - 1;
    if (span < 0) fail("depthwise_conv", "the kernel is larger than the padded input");
    out.push_back(span / stride[d] + 1);
    p.kernel.push_back(k);
  }
  p.stride = stride;
  p.dilation = dilation;
  p.lo = lo;
  p.out = out;
  for (size_t d = 0; d < nd; ++d) p.extent.push_back(x.shape(1 + d));
  const bool half = x.dtype() == mx::float16 || x.dtype() == mx::bfloat16;
  const mx::Dtype run = half ? mx::float32 : x.dtype();
  auto xin = mx::contiguous(mx::astype(x, run, s), false, s);
  auto win = mx::contiguous(mx::astype(w, run, s), false, s);
  mx::Shape shape{x.shape(0)};
  for (int64_t o : out) shape.push_back(static_cast<int>(o));
  shape.push_back(w.shape(0));
  auto y = mx::array(shape, run, std::make_shared<DepthwiseConv>(s, std::move(p), DwKind::forward), {xin, win});
  return half ? mx::astype(y, x.dtype(), s) : y;
}

// ------------------------------------------------------------------------------------------------ dequantize
// MLX's affine dequantize of a float32 (rows, K) matrix in one multi-threaded pass (quantize_kernels.h). Gradients
// to the scales and biases as mx.dequantize has them (sum over a group of g * q, of g); none to the packed weight.
class DequantizeAffine : public mx::UnaryPrimitive {
 public:
  DequantizeAffine(mx::Stream s, int group_size, int bits) : mx::UnaryPrimitive(s), group_size_(group_size),
                                                             bits_(bits) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [gs = group_size_, bits = bits_](auto& in, auto& out) {
      const int64_t rows = out[0].shape(0), K = out[0].shape(1);
      const auto* w = in[0].template data<uint32_t>();
      const auto* sc = in[1].template data<float>();
      const auto* bi = in[2].template data<float>();
      auto* y = out[0].template data<float>();
      if (bits == 4) {
        dequantize_affine<4>(w, sc, bi, rows, K, gs, y);
      } else {
        dequantize_affine<8>(w, sc, bi, rows, K, gs, y);
      }
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.dequantize_affine] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return "PorterDequantizeAffine"; }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    auto s = stream();
    const auto& scales = primals[1];
    const int rows = scales.shape(0), groups = scales.shape(1);
    auto g = mx::reshape(mx::astype(cotangents[0], mx::float32, s), {rows, groups, group_size_}, s);
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (arg == 0) {
        grads.push_back(mx::zeros_like(primals[0], s));
      } else if (arg == 1) {  // d/d scale = sum over the group of g * q, q the integer levels as float
        auto levels = mx::array(mx::Shape{rows, groups * group_size_}, mx::float32,
                                std::make_shared<DequantizeAffine>(s, group_size_, bits_),
                                {primals[0], mx::ones_like(scales, s), mx::zeros_like(scales, s)});
        auto q = mx::reshape(levels, {rows, groups, group_size_}, s);
        grads.push_back(mx::sum(mx::multiply(g, q, s), -1, false, s));
      } else {
        grads.push_back(mx::sum(g, -1, false, s));
      }
    }
    return grads;
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const DequantizeAffine*>(&other);
    return o != nullptr && o->group_size_ == group_size_ && o->bits_ == bits_;
  }

 private:
  int group_size_, bits_;
};

mx::array dequantize_affine_op(const mx::array& w, const mx::array& scales, const mx::array& biases, int group_size,
                               int bits) {
  auto s = cpu_stream("dequantize_affine");
  if (bits != 4 && bits != 8) fail("dequantize_affine", "bits must be 4 or 8");
  if (group_size <= 0 || group_size % (32 / bits)) fail("dequantize_affine", "group_size must fill whole words");
  if (w.dtype() != mx::uint32 || w.ndim() != 2) fail("dequantize_affine", "w must be a 2-d uint32 array");
  const int64_t rows = w.shape(0), K = int64_t{w.shape(1)} * (32 / bits);
  if (K % group_size) fail("dequantize_affine", "the row length must be a multiple of group_size");
  for (const auto* a : {&scales, &biases}) {
    if (a->dtype() != mx::float32 || a->ndim() != 2 || a->shape(0) != rows || a->shape(1) != K / group_size) {
      fail("dequantize_affine", "scales and biases must be float32 (rows, K / group_size)");
    }
  }
  return mx::array(mx::Shape{static_cast<int>(rows), static_cast<int>(K)}, mx::float32,
                   std::make_shared<DequantizeAffine>(s, group_size, bits),
                   {mx::contiguous(w, false, s), mx::contiguous(scales, false, s), mx::contiguous(biases, false, s)});
}

// ------------------------------------------------------------------------------------------------ winograd
// The three passes of a Winograd F(2x2, 3x3) conv (winograd_kernels.h); the GEMMs between them are mx.matmul.
// Forward only: the layer (layers/conv.py) wraps them in an mx.custom_function whose VJP is MLX's conv's.
enum class WinoKind { weight, input, output };

mx::Shape prepend(int v, mx::Shape shape) {
  shape.insert(shape.begin(), v);
  return shape;
}

// One pass as an array, its shape derived from the kind, the geometry and its first input: weight (C_out, 3, 3, C_in)
// -> (16, C_in, C_out); input x -> (16, T, C_in); output m (16, T, C_out), x, w -> (N, Ho, Wo, C_out).
mx::array wino_pass(mx::Stream s, WinoKind kind, const WinoGeometry& g, std::vector<mx::array> in);

class Winograd : public mx::UnaryPrimitive {
 public:
  Winograd(mx::Stream s, WinoKind kind, WinoGeometry g) : mx::UnaryPrimitive(s), kind_(kind), g_(g) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [kind = kind_, g = g_](auto& in, auto& out) {
      const float* src = in[0].template data<float>();
      float* dst = out[0].template data<float>();
      switch (kind) {
        case WinoKind::weight: winograd_weight(src, in[0].shape(0), in[0].shape(-1), dst); break;
        case WinoKind::input: winograd_input(src, g, dst); break;
        case WinoKind::output:
          winograd_output(src, in[1].template data<float>(), in[2].template data<float>(), g, in[0].shape(-1), dst);
          break;
      }
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.winograd] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override {
    switch (kind_) {
      case WinoKind::weight: return "PorterWinogradWeight";
      case WinoKind::input: return "PorterWinogradInput";
      default: return "PorterWinogradOutput";
    }
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>&, const std::vector<mx::array>&, const std::vector<int>&,
                             const std::vector<mx::array>&) override {
    throw std::invalid_argument(
        "[porter.winograd] the transforms have no VJP of their own: differentiate the conv layer, whose custom "
        "VJP is MLX's conv");
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>&) override {
    // each pass is linear: its tangent is the same pass of the tangent (MLX pushes tangents through the inner
    // graph of the layer's custom function as well)
    auto s = stream();
    std::vector<mx::array> in{mx::astype(tangents[0], mx::float32, s)};
    if (kind_ == WinoKind::output) in.insert(in.end(), {primals[1], primals[2]});
    return {wino_pass(s, kind_, g_, std::move(in))};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    // MLX maps a custom function's inner graph too (the layer's custom vmap is MLX's conv), so each pass maps:
    // the vmap axis joins the batch (input, output) or the output channels (weight).
    auto s = stream();
    int v = 0;
    for (size_t i = 0; i < axes.size(); ++i) {
      if (axes[i] >= 0) v = inputs[i].shape(axes[i]);
    }
    auto a = axes[0] >= 0 ? mx::moveaxis(inputs[0], axes[0], 0, s)
                          : mx::broadcast_to(mx::expand_dims(inputs[0], 0, s), prepend(v, inputs[0].shape()), s);
    WinoGeometry g = g_;
    g.n *= v;
    switch (kind_) {
      case WinoKind::weight: {  // (V, C_out, 3, 3, C_in) -> (16, C_in, V, C_out)
        const int co = a.shape(1), ci = a.shape(4);
        auto u = wino_pass(s, kind_, g_, {mx::reshape(a, {v * co, 3, 3, ci}, s)});
        return {{mx::reshape(u, {16, ci, v, co}, s)}, {2}};
      }
      case WinoKind::input: {  // (V, N, H, W, C) -> (16, V, T, C)
        const int c = a.shape(4);
        auto out = wino_pass(s, kind_, g, {mx::reshape(a, {v * a.shape(1), a.shape(2), a.shape(3), c}, s)});
        return {{mx::reshape(out, {16, v, static_cast<int>(g_.tiles()), c}, s)}, {1}};
      }
      default: {  // (V, 16, T, C_out), x (V, N, H, W, C_in) -> (V, N, Ho, Wo, C_out)
        auto x = axes[1] >= 0 ? mx::moveaxis(inputs[1], axes[1], 0, s)
                              : mx::broadcast_to(mx::expand_dims(inputs[1], 0, s), prepend(v, inputs[1].shape()), s);
        if (axes[2] >= 0) {  // weights per example: one pass each (rare; the layer's own vmap is MLX's conv)
          auto w = mx::moveaxis(inputs[2], axes[2], 0, s);
          std::vector<mx::array> ys;
          for (int k = 0; k < v; ++k) {
            ys.push_back(wino_pass(s, kind_, g_, {mx::take(a, k, 0, s), mx::take(x, k, 0, s), mx::take(w, k, 0, s)}));
          }
          return {{mx::stack(ys, 0, s)}, {0}};
        }
        auto m = mx::reshape(mx::moveaxis(a, 0, 1, s), {16, v * a.shape(2), a.shape(3)}, s);
        x = mx::reshape(x, {v * x.shape(1), x.shape(2), x.shape(3), x.shape(4)}, s);
        auto y = wino_pass(s, kind_, g, {m, x, inputs[2]});
        return {{mx::reshape(y, prepend(v, {static_cast<int>(g_.n), y.shape(1), y.shape(2), y.shape(3)}), s)}, {0}};
      }
    }
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<Winograd>(*this, other)) return false;
    auto& o = static_cast<const Winograd&>(other);
    return kind_ == o.kind_ && g_ == o.g_;
  }

 private:
  WinoKind kind_;
  WinoGeometry g_;
};

mx::array wino_pass(mx::Stream s, WinoKind kind, const WinoGeometry& g, std::vector<mx::array> in) {
  mx::Shape shape;
  switch (kind) {
    case WinoKind::weight: shape = {16, in[0].shape(-1), in[0].shape(0)}; break;
    case WinoKind::input: shape = {16, static_cast<int>(g.tiles()), in[0].shape(3)}; break;
    case WinoKind::output:
      shape = {static_cast<int>(g.n), static_cast<int>(g.ho), static_cast<int>(g.wo), in[0].shape(2)};
      break;
  }
  for (auto& a : in) a = mx::contiguous(a, false, s);
  return mx::array(std::move(shape), mx::float32, std::make_shared<Winograd>(s, kind, g), std::move(in));
}

void check_f32(const mx::array& a, const char* what, const char* arg) {
  if (a.dtype() != mx::float32) fail(what, std::string(arg) + " must be float32");
}

// Transformed weights, kept while their weight array lives: a model's frozen conv weights are transformed once.
// Keyed by the weight's array id; the entry holds a reference to that array, so the id cannot be reused by another
// array while cached (an array overwritten in place through Python gets a new id). An entry is dropped when the
// cache holds the last reference to its weight, and least recently used entries go when the transformed weights
// exceed the limit (bytes; PORTER_WINOGRAD_CACHE_MB, default 512; 0 disables the cache).
class WinogradCache {
 public:
  static WinogradCache& get() {
    static WinogradCache cache;
    return cache;
  }
  std::optional<mx::array> lookup(const mx::array& w) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(w.id());
    if (it == entries_.end()) return std::nullopt;
    it->second.tick = ++tick_;
    return it->second.u;
  }
  void insert(const mx::array& w, const mx::array& u) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<int64_t>(u.nbytes()) > limit_) return;
    sweep_locked();
    auto old = entries_.find(w.id());  // another thread may have inserted it since our lookup
    if (old != entries_.end()) erase_locked(old);
    entries_.emplace(w.id(), Entry{w, u, ++tick_});
    bytes_ += u.nbytes();
    while (bytes_ > limit_) {
      auto oldest = entries_.begin();
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->second.tick < oldest->second.tick) oldest = it;
      }
      erase_locked(oldest);
    }
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.clear();
    bytes_ = 0;
  }
  void set_limit(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = bytes;
    while (bytes_ > limit_ && !entries_.empty()) erase_locked(entries_.begin());
  }
  std::vector<int64_t> info() {
    std::lock_guard<std::mutex> lock(mutex_);
    sweep_locked();
    return {static_cast<int64_t>(entries_.size()), bytes_, limit_};
  }
  bool enabled() {
    std::lock_guard<std::mutex> lock(mutex_);
    return limit_ > 0;
  }

 private:
  struct Entry {
    mx::array w, u;
    uint64_t tick;
  };
  WinogradCache() {
    const char* env = std::getenv("PORTER_WINOGRAD_CACHE_MB");
    if (env && *env) limit_ = std::max<int64_t>(0, std::atoll(env)) << 20;
  }
  void erase_locked(std::unordered_map<std::uintptr_t, Entry>::iterator it) {
    bytes_ -= it->second.u.nbytes();
    entries_.erase(it);
  }
  void sweep_locked() {  // weights nobody else holds any more
    for (auto it = entries_.begin(); it != entries_.end();) {
      const mx::array& w = it->second.w;
      if (w.is_available() && w.data_shared_ptr() && w.is_donatable()) {
        auto dead = it++;
        erase_locked(dead);
      } else {
        ++it;
      }
    }
  }
  std::mutex mutex_;
  std::unordered_map<std::uintptr_t, Entry> entries_;
  uint64_t tick_ = 0;
  int64_t bytes_ = 0;
  int64_t limit_ = int64_t{512} << 20;
};

// w (C_out, 3, 3, C_in) -> U (16, C_in, C_out), cached per weight array unless `cache` is false or w is traced.
mx::array winograd_weight_op(const mx::array& w, bool cache) {
  auto s = cpu_stream("winograd_weight");
  if (w.ndim() != 4 || w.shape(1) != 3 || w.shape(2) != 3) fail("winograd_weight", "w must be (C_out, 3, 3, C_in)");
  check_f32(w, "winograd_weight", "w");
  auto& store = WinogradCache::get();
  cache = cache && !w.is_tracer() && store.enabled();
  if (cache) {
    if (auto hit = store.lookup(w)) return *hit;
  }
  auto u = wino_pass(s, WinoKind::weight, WinoGeometry{}, {w});
  if (cache) store.insert(w, u);
  return u;
}

WinoGeometry wino_geometry(const mx::array& x, int64_t lo_h, int64_t lo_w, int64_t ho, int64_t wo,
                           const char* what) {
  if (lo_h < 0 || lo_w < 0 || ho <= 0 || wo <= 0) fail(what, "padding must be non-negative and the output non-empty");
  WinoGeometry g;
  g.n = x.shape(0);
  g.h = x.shape(1);
  g.w = x.shape(2);
  g.c = x.shape(3);
  g.lo_h = lo_h;
  g.lo_w = lo_w;
  g.ho = ho;
  g.wo = wo;
  if (g.n <= 0 || g.c <= 0) fail(what, "x must have a batch and channels");
  return g;
}

// x (N, H, W, C) -> V (16, T, C) for an output of ho x wo with lo_h / lo_w zero rows / columns before the input.
// The Winograd transforms of the kD depth taps of a 3-d conv weight (C_out, kD, 3, 3, C_in), stacked as
// (kD, 16, C_in, C_out) and cached by the 5-d weight like winograd_weight: 3-d convs run as 2-d convs per depth tap
// (layers/conv.py), and a tap sliced per call would be a new array, never found in the cache.
mx::array winograd_weight_taps_op(const mx::array& w, bool cache) {
  auto s = cpu_stream("winograd_weight_taps");
  if (w.ndim() != 5 || w.shape(2) != 3 || w.shape(3) != 3) {
    fail("winograd_weight_taps", "w must be (C_out, kD, 3, 3, C_in)");
  }
  check_f32(w, "winograd_weight_taps", "w");
  auto& store = WinogradCache::get();
  cache = cache && !w.is_tracer() && store.enabled();
  if (cache) {
    if (auto hit = store.lookup(w)) return *hit;
  }
  const int c_out = w.shape(0), c_in = w.shape(4);
  std::vector<mx::array> taps;
  for (int j = 0; j < w.shape(1); ++j) {
    auto tap = mx::reshape(mx::slice(w, {0, j, 0, 0, 0}, {c_out, j + 1, 3, 3, c_in}, s), {c_out, 3, 3, c_in}, s);
    taps.push_back(wino_pass(s, WinoKind::weight, WinoGeometry{}, {tap}));
  }
  auto u = mx::stack(taps, 0, s);
  if (cache) store.insert(w, u);
  return u;
}

mx::array winograd_input_op(const mx::array& x, int64_t lo_h, int64_t lo_w, int64_t ho, int64_t wo) {
  auto s = cpu_stream("winograd_input");
  if (x.ndim() != 4) fail("winograd_input", "x must be (N, H, W, C)");
  check_f32(x, "winograd_input", "x");
  auto g = wino_geometry(x, lo_h, lo_w, ho, wo, "winograd_input");
  return wino_pass(s, WinoKind::input, g, {x});
}

// M (16, T, C_out) -> y (N, ho, wo, C_out) with T = N * ceil(ho/2) * ceil(wo/2); x (N, H, W, C_in) and
// w (C_out, 3, 3, C_in) are the conv's input and weight (tiles with non-finite outputs are redone directly).
mx::array winograd_output_op(const mx::array& m, const mx::array& x, const mx::array& w, int64_t lo_h, int64_t lo_w,
                             int64_t ho, int64_t wo) {
  auto s = cpu_stream("winograd_output");
  if (m.ndim() != 3 || m.shape(0) != 16) fail("winograd_output", "m must be (16, T, C_out)");
  if (x.ndim() != 4) fail("winograd_output", "x must be (N, H, W, C_in)");
  if (w.ndim() != 4 || w.shape(1) != 3 || w.shape(2) != 3 || w.shape(3) != x.shape(3) || w.shape(0) != m.shape(2)) {
    fail("winograd_output", "w must be (C_out, 3, 3, C_in) matching m and x");
  }
  check_f32(m, "winograd_output", "m");
  check_f32(x, "winograd_output", "x");
  check_f32(w, "winograd_output", "w");
  auto g = wino_geometry(x, lo_h, lo_w, ho, wo, "winograd_output");
  if (g.tiles() != m.shape(1)) fail("winograd_output", "m's tile count does not match N * ceil(ho/2) * ceil(wo/2)");
  return wino_pass(s, WinoKind::output, g, {m, x, w});
}

std::vector<int64_t> winograd_cache_info() { return WinogradCache::get().info(); }
void winograd_cache_clear() { WinogradCache::get().clear(); }
void winograd_cache_set_limit(int64_t bytes) { WinogradCache::get().set_limit(bytes); }

}  // namespace porter

// ================================================================================ conv3d (issue 15) BEGIN
// Winograd F(2x2, 3x3) for (kD, 3, 3) stride-1 3-d convs, depth taps summed in the GEMMs (conv3d_kernels.h): four
// passes, one primitive class. The GEMMs between them are mx.matmul / mx.addmm (layers/_native.py, winograd_conv3d).
#include "conv3d_kernels.h"

namespace porter {

enum class Wino3dKind { input, output, output_adjoint, weight_adjoint, weight };

mx::array wino3d_pass(mx::Stream s, Wino3dKind kind, const Wino3dGeometry& g, std::vector<mx::array> in);

class Winograd3d : public mx::UnaryPrimitive {
 public:
  Winograd3d(mx::Stream s, Wino3dKind kind, Wino3dGeometry g) : mx::UnaryPrimitive(s), kind_(kind), g_(g) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [kind = kind_, g = g_](auto& in, auto& out) {
      const float* a = in[0].template data<float>();
      float* dst = out[0].template data<float>();
      switch (kind) {
        case Wino3dKind::input: wino3d_input(a, g, dst); break;
        case Wino3dKind::output:
          wino3d_output(a, in[1].template data<float>(), in[2].template data<float>(), g, in[0].shape(-1), dst);
          break;
        case Wino3dKind::output_adjoint: wino3d_output_adjoint(a, g, in[0].shape(-1), dst); break;
        case Wino3dKind::weight_adjoint:
          wino3d_weight_adjoint(a, in[1].template data<float>(), in[2].template data<float>(), g, in[0].shape(-1),
                                dst);
          break;
        case Wino3dKind::weight: wino3d_weight(a, in[0].shape(0), in[0].shape(1), in[0].shape(4), dst); break;
      }
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.winograd3d] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override {
    switch (kind_) {
      case Wino3dKind::input: return "PorterWinograd3dInput";
      case Wino3dKind::output: return "PorterWinograd3dOutput";
      case Wino3dKind::output_adjoint: return "PorterWinograd3dOutputAdjoint";
      case Wino3dKind::weight: return "PorterWinograd3dWeight";
      default: return "PorterWinograd3dWeightAdjoint";
    }
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>&, const std::vector<mx::array>&, const std::vector<int>&,
                             const std::vector<mx::array>&) override {
    throw std::invalid_argument(
        "[porter.winograd3d] the passes have no VJP of their own, so the 3-d Winograd conv has no second derivative: "
        "differentiate it once, or set porter.layers._conv_engine.WINOGRAD_3D = False for higher orders");
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override {
    // every pass is linear in its first input (the others only feed the direct redo of non-finite results)
    auto s = stream();
    for (size_t i = 0; i < argnums.size(); ++i) {
      if (argnums[i] == 0) {
        std::vector<mx::array> in = primals;
        in[0] = mx::astype(tangents[i], mx::float32, s);
        return {wino3d_pass(s, kind_, g_, std::move(in))};
      }
    }
    return {mx::zeros(shape_of(primals), mx::float32, s)};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    // one pass per mapped example (the conv's own custom vmap is MLX's conv; this only runs when MLX maps the
    // custom function's inner graph as well)
    auto s = stream();
    int v = 0;
    for (size_t i = 0; i < axes.size(); ++i) {
      if (axes[i] >= 0) v = inputs[i].shape(axes[i]);
    }
    std::vector<mx::array> outs;
    for (int k = 0; k < v; ++k) {
      std::vector<mx::array> in;
      for (size_t i = 0; i < inputs.size(); ++i) {
        in.push_back(axes[i] >= 0 ? mx::take(inputs[i], k, axes[i], s) : inputs[i]);
      }
      outs.push_back(wino3d_pass(s, kind_, g_, std::move(in)));
    }
    return {{mx::stack(outs, 0, s)}, {0}};
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<Winograd3d>(*this, other)) return false;
    auto& o = static_cast<const Winograd3d&>(other);
    return kind_ == o.kind_ && g_ == o.g_;
  }
  mx::Shape shape_of(const std::vector<mx::array>& in) const { return out_shape(kind_, g_, in); }

  static mx::Shape out_shape(Wino3dKind kind, const Wino3dGeometry& g, const std::vector<mx::array>& in) {
    switch (kind) {
      case Wino3dKind::input: return {16, static_cast<int>(g.in_rows()), static_cast<int>(g.ci)};
      case Wino3dKind::output:
        return {static_cast<int>(g.n), static_cast<int>(g.dout), static_cast<int>(g.ho), static_cast<int>(g.wo),
                in[0].shape(-1)};
      case Wino3dKind::output_adjoint: return {16, static_cast<int>(g.out_rows()), in[0].shape(-1)};
      case Wino3dKind::weight: return {in[0].shape(1), 16, in[0].shape(4), in[0].shape(0)};
      default: return {in[0].shape(-1), static_cast<int>(g.kd), 3, 3, static_cast<int>(g.ci)};
    }
  }

 private:
  Wino3dKind kind_;
  Wino3dGeometry g_;
};

mx::array wino3d_pass(mx::Stream s, Wino3dKind kind, const Wino3dGeometry& g, std::vector<mx::array> in) {
  auto shape = Winograd3d::out_shape(kind, g, in);
  for (auto& a : in) a = mx::contiguous(a, false, s);
  return mx::array(std::move(shape), mx::float32, std::make_shared<Winograd3d>(s, kind, g), std::move(in));
}

// The geometry of a conv of x (N, D, H, W, C_in) with kd depth taps, lo_* zero padding before, output dout x ho x wo.
Wino3dGeometry wino3d_geometry(const mx::array& x, int64_t kd, int64_t lo_d, int64_t lo_h, int64_t lo_w,
                               int64_t dout, int64_t ho, int64_t wo, const char* what) {
  if (x.ndim() != 5) fail(what, "x must be (N, D, H, W, C_in)");
  check_f32(x, what, "x");
  if (kd <= 0 || lo_d < 0 || lo_h < 0 || lo_w < 0 || dout <= 0 || ho <= 0 || wo <= 0) {
    fail(what, "kd must be positive, padding non-negative and the output non-empty");
  }
  Wino3dGeometry g;
  g.n = x.shape(0);
  g.d = x.shape(1);
  g.h = x.shape(2);
  g.w = x.shape(3);
  g.ci = x.shape(4);
  g.kd = kd;
  g.lo_d = lo_d;
  g.lo_h = lo_h;
  g.lo_w = lo_w;
  g.dout = dout;
  g.ho = ho;
  g.wo = wo;
  if (g.n <= 0 || g.ci <= 0) fail(what, "x must have a batch and channels");
  return g;
}

// x (N, D, H, W, C_in) -> V (16, F * N * T, C_in), F = dout + kd - 1 frames from depth -lo_d.
mx::array winograd3d_input_op(const mx::array& x, int64_t kd, int64_t lo_d, int64_t lo_h, int64_t lo_w, int64_t dout,
                              int64_t ho, int64_t wo) {
  auto s = cpu_stream("winograd3d_input");
  auto g = wino3d_geometry(x, kd, lo_d, lo_h, lo_w, dout, ho, wo, "winograd3d_input");
  return wino3d_pass(s, Wino3dKind::input, g, {x});
}

void check_wino3d_weight(const mx::array& w, const Wino3dGeometry& g, int64_t co, const char* what) {
  if (w.ndim() != 5 || w.shape(0) != co || w.shape(1) != g.kd || w.shape(2) != 3 || w.shape(3) != 3 ||
      w.shape(4) != g.ci) {
    fail(what, "w must be (C_out, kD, 3, 3, C_in) matching x and the GEMM result");
  }
  check_f32(w, what, "w");
}

// M (16, dout * N * T, C_out) -> y (N, dout, ho, wo, C_out); x, w: the conv's input and weight (direct redo).
mx::array winograd3d_output_op(const mx::array& m, const mx::array& x, const mx::array& w, int64_t lo_d, int64_t lo_h,
                               int64_t lo_w, int64_t dout, int64_t ho, int64_t wo) {
  auto s = cpu_stream("winograd3d_output");
  if (w.ndim() != 5) fail("winograd3d_output", "w must be (C_out, kD, 3, 3, C_in)");
  auto g = wino3d_geometry(x, w.shape(1), lo_d, lo_h, lo_w, dout, ho, wo, "winograd3d_output");
  if (m.ndim() != 3 || m.shape(0) != 16 || m.shape(1) != g.out_rows()) {
    fail("winograd3d_output", "m must be (16, dout * N * ceil(ho/2) * ceil(wo/2), C_out)");
  }
  check_f32(m, "winograd3d_output", "m");
  check_wino3d_weight(w, g, m.shape(2), "winograd3d_output");
  return wino3d_pass(s, Wino3dKind::output, g, {m, x, w});
}

// gy (N, dout, ho, wo, C_out) -> dM (16, dout * N * T, C_out): the output pass's adjoint; x gives the geometry.
mx::array winograd3d_output_adjoint_op(const mx::array& gy, const mx::array& x, int64_t kd, int64_t lo_d, int64_t lo_h,
                                       int64_t lo_w) {
  auto s = cpu_stream("winograd3d_output_adjoint");
  if (gy.ndim() != 5 || gy.shape(0) != x.shape(0)) fail("winograd3d_output_adjoint", "gy must be (N, D, H, W, C_out)");
  check_f32(gy, "winograd3d_output_adjoint", "gy");
  auto g = wino3d_geometry(x, kd, lo_d, lo_h, lo_w, gy.shape(1), gy.shape(2), gy.shape(3), "winograd3d_output_adjoint");
  return wino3d_pass(s, Wino3dKind::output_adjoint, g, {gy});
}

// dU (kD, 16, C_in, C_out) -> dw (C_out, kD, 3, 3, C_in); x (N, D, H, W, C_in) and gy (N, dout, ho, wo, C_out) for
// the direct redo when the result is not finite.
mx::array winograd3d_weight_adjoint_op(const mx::array& du, const mx::array& x, const mx::array& gy, int64_t lo_d,
                                       int64_t lo_h, int64_t lo_w) {
  auto s = cpu_stream("winograd3d_weight_adjoint");
  if (du.ndim() != 4 || du.shape(1) != 16) fail("winograd3d_weight_adjoint", "du must be (kD, 16, C_in, C_out)");
  if (gy.ndim() != 5 || gy.shape(-1) != du.shape(3) || gy.shape(0) != x.shape(0)) {
    fail("winograd3d_weight_adjoint", "gy must be (N, D, H, W, C_out) matching du and x");
  }
  check_f32(du, "winograd3d_weight_adjoint", "du");
  check_f32(gy, "winograd3d_weight_adjoint", "gy");
  auto g = wino3d_geometry(x, du.shape(0), lo_d, lo_h, lo_w, gy.shape(1), gy.shape(2), gy.shape(3),
                           "winograd3d_weight_adjoint");
  if (du.shape(2) != g.ci) fail("winograd3d_weight_adjoint", "du's C_in does not match x");
  return wino3d_pass(s, Wino3dKind::weight_adjoint, g, {du, x, gy});
}

// w (C_out, kD, 3, 3, C_in) -> U (kD, 16, C_in, C_out) in one blocked pass; cached per weight array like
// winograd_weight_taps (same key, same result) unless `cache` is false or w is traced.
mx::array winograd3d_weight_op(const mx::array& w, bool cache) {
  auto s = cpu_stream("winograd3d_weight");
  if (w.ndim() != 5 || w.shape(2) != 3 || w.shape(3) != 3) fail("winograd3d_weight", "w must be (C_out, kD, 3, 3, C_in)");
  check_f32(w, "winograd3d_weight", "w");
  auto& store = WinogradCache::get();
  cache = cache && !w.is_tracer() && store.enabled();
  if (cache) {
    if (auto hit = store.lookup(w)) return *hit;
  }
  auto u = wino3d_pass(s, Wino3dKind::weight, Wino3dGeometry{}, {w});
  if (cache) store.insert(w, u);
  return u;
}

void bind_conv3d(nb::module_& m) {
  m.def("winograd3d_weight", &winograd3d_weight_op, nb::arg("w"), nb::arg("cache") = true);
  m.def("winograd3d_input", &winograd3d_input_op, nb::arg("x"), nb::arg("kd"), nb::arg("lo_d"), nb::arg("lo_h"),
        nb::arg("lo_w"), nb::arg("dout"), nb::arg("ho"), nb::arg("wo"));
  m.def("winograd3d_output", &winograd3d_output_op, nb::arg("m"), nb::arg("x"), nb::arg("w"), nb::arg("lo_d"),
        nb::arg("lo_h"), nb::arg("lo_w"), nb::arg("dout"), nb::arg("ho"), nb::arg("wo"));
  m.def("winograd3d_output_adjoint", &winograd3d_output_adjoint_op, nb::arg("gy"), nb::arg("x"), nb::arg("kd"),
        nb::arg("lo_d"), nb::arg("lo_h"), nb::arg("lo_w"));
  m.def("winograd3d_weight_adjoint", &winograd3d_weight_adjoint_op, nb::arg("du"), nb::arg("x"), nb::arg("gy"),
        nb::arg("lo_d"), nb::arg("lo_h"), nb::arg("lo_w"));
}

}  // namespace porter
// ================================================================================ conv3d (issue 15) END

// ------------------------------------------------------------------------------------------------ weight flip
// The kernel of a stride-1 conv's input gradient (weight_flip_kernels.h): w (C_out, *kernel, C_in/G) ->
// (C_in, *kernel, C_out/G), taps reversed, channels swapped per group. Linear and its own inverse for the same G,
// so its VJP and JVP are the same op of the cotangent / tangent; vmap folds the mapped axis into the groups.
#include "weight_flip_kernels.h"

namespace porter {

mx::array flip_conv_weight_op(const mx::array& w, int groups);

class FlipConvWeight : public mx::UnaryPrimitive {
 public:
  FlipConvWeight(mx::Stream s, int groups) : mx::UnaryPrimitive(s), groups_(groups) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [groups = groups_](auto& in, auto& out) {
      const auto& w = in[0];
      int64_t k = 1;
      for (int i = 1; i + 1 < static_cast<int>(w.ndim()); ++i) k *= w.shape(i);
      const int64_t co = w.shape(0) / groups, ci = w.shape(-1);
      switch (w.itemsize()) {
        case 1: flip_swap_weight(w.template data<uint8_t>(), groups, co, k, ci, out[0].template data<uint8_t>()); break;
        case 2: flip_swap_weight(w.template data<uint16_t>(), groups, co, k, ci, out[0].template data<uint16_t>()); break;
        case 4: flip_swap_weight(w.template data<uint32_t>(), groups, co, k, ci, out[0].template data<uint32_t>()); break;
        default: flip_swap_weight(w.template data<uint64_t>(), groups, co, k, ci, out[0].template data<uint64_t>());
      }
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.flip_conv_weight] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return "PorterFlipConvWeight"; }
  std::vector<mx::array> vjp(const std::vector<mx::array>&, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>&) override {
    return {flip_conv_weight_op(cotangents[0], groups_)};
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>&, const std::vector<mx::array>& tangents,
                             const std::vector<int>&) override {
    return {flip_conv_weight_op(tangents[0], groups_)};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    // (V, C_out, *kernel, C_in/G) is (V * C_out, *kernel, C_in/G) with V * G groups: (V * C_in, *kernel, C_out/G)
    auto s = stream();
    auto a = mx::moveaxis(inputs[0], axes[0], 0, s);
    const int v = a.shape(0);
    mx::Shape merged(a.shape().begin() + 1, a.shape().end());
    merged[0] *= v;
    auto y = flip_conv_weight_op(mx::reshape(a, merged, s), groups_ * v);
    mx::Shape split = y.shape();
    split[0] /= v;
    split.insert(split.begin(), v);
    return {{mx::reshape(y, split, s)}, {0}};
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<FlipConvWeight>(*this, other) && static_cast<const FlipConvWeight&>(other).groups_ == groups_;
  }

 private:
  int groups_;
};

mx::array flip_conv_weight_op(const mx::array& w, int groups) {
  auto s = cpu_stream("flip_conv_weight");
  if (w.ndim() < 3) fail("flip_conv_weight", "w must be (C_out, *kernel, C_in/groups) with a spatial dim");
  if (groups < 1 || w.shape(0) % groups != 0) fail("flip_conv_weight", "groups must divide w's C_out");
  if (w.itemsize() != 1 && w.itemsize() != 2 && w.itemsize() != 4 && w.itemsize() != 8) {
    fail("flip_conv_weight", "w's dtype must be 1, 2, 4 or 8 bytes wide");
  }
  mx::Shape shape = w.shape();
  shape.front() = w.shape(-1) * groups;
  shape.back() = w.shape(0) / groups;
  return mx::array(std::move(shape), w.dtype(), std::make_shared<FlipConvWeight>(s, groups),
                   {mx::contiguous(w, false, s)});
}

void bind_flip_conv_weight(nb::module_& m) {
  m.def("flip_conv_weight", &flip_conv_weight_op, nb::arg("w"), nb::arg("groups") = 1);
}

}  // namespace porter

NB_MODULE(_porter_kernels, m) {
  m.doc() = "Porter's native CPU kernels for MLX (channels-last pooling and depthwise convolution).";
  m.def("window_max", &porter::window_max_op, nb::arg("x"), nb::arg("first"), nb::arg("end"), nb::arg("step"),
        nb::arg("with_indices"));
  m.def("window_max_grad", &porter::window_max_grad_op, nb::arg("x"), nb::arg("grad"), nb::arg("first"),
        nb::arg("end"), nb::arg("step"));
  m.def("fractional_max", &porter::fractional_max_op, nb::arg("x"), nb::arg("samples"), nb::arg("kernel"),
        nb::arg("out"), nb::arg("column"));
  m.def("window_sum", &porter::window_sum_op, nb::arg("x"), nb::arg("first"), nb::arg("end"), nb::arg("divisor"),
        nb::arg("override"), nb::arg("sequential"), nb::arg("power") = 1.0);
  m.def("window_sum_grad", &porter::window_sum_grad_op, nb::arg("grad"), nb::arg("plane"), nb::arg("first"),
        nb::arg("end"), nb::arg("divisor"), nb::arg("override"), nb::arg("sequential"));
  m.def("plane_scatter", &porter::plane_scatter_op, nb::arg("src"), nb::arg("index"), nb::arg("plane"),
        nb::arg("assign"));
  m.def("plane_gather", &porter::plane_gather_op, nb::arg("src"), nb::arg("index"));
  m.def("depthwise_conv", &porter::depthwise_conv_op, nb::arg("x"), nb::arg("w"), nb::arg("stride"), nb::arg("lo"),
        nb::arg("hi"), nb::arg("dilation"));
  m.def("grouped_conv", &porter::grouped_conv_op, nb::arg("x"), nb::arg("w"), nb::arg("stride"), nb::arg("lo"),
        nb::arg("hi"), nb::arg("dilation"), nb::arg("groups"));
  m.def("channel_affine", &porter::channel_affine_op, nb::arg("x"), nb::arg("alpha"), nb::arg("beta"),
        nb::arg("relu"));
  m.def("relu", &porter::relu_op, nb::arg("x"));
  m.def("activation", &porter::activation_op, nb::arg("x"), nb::arg("kind"));
  m.def("activation_grad", &porter::activation_grad_op, nb::arg("x"), nb::arg("g"), nb::arg("kind"));
  m.def("softmax", &porter::softmax_op, nb::arg("x"), nb::arg("axis"));
  m.def("softmax_grad", &porter::softmax_grad_op, nb::arg("y"), nb::arg("g"), nb::arg("axis"));
  m.def("norm", &porter::norm_op, nb::arg("x"), nb::arg("weight").none(), nb::arg("bias").none(), nb::arg("groups"),
        nb::arg("eps"));
  m.def("norm_grad", &porter::norm_grad_op, nb::arg("x"), nb::arg("g"), nb::arg("weight").none(), nb::arg("groups"),
        nb::arg("eps"));
  m.def("lp_root", &porter::lp_root_op, nb::arg("a"), nb::arg("scale"), nb::arg("inv_p"));
  m.def("dequantize_affine", &porter::dequantize_affine_op, nb::arg("w"), nb::arg("scales"), nb::arg("biases"),
        nb::arg("group_size"), nb::arg("bits"));
  m.def("winograd_weight", &porter::winograd_weight_op, nb::arg("w"), nb::arg("cache") = true);
  m.def("winograd_weight_taps", &porter::winograd_weight_taps_op, nb::arg("w"), nb::arg("cache") = true);
  m.def("winograd_input", &porter::winograd_input_op, nb::arg("x"), nb::arg("lo_h"), nb::arg("lo_w"), nb::arg("ho"),
        nb::arg("wo"));
  m.def("winograd_output", &porter::winograd_output_op, nb::arg("m"), nb::arg("x"), nb::arg("w"), nb::arg("lo_h"),
        nb::arg("lo_w"), nb::arg("ho"), nb::arg("wo"));
  m.def("winograd_cache_info", &porter::winograd_cache_info);
  m.def("winograd_cache_clear", &porter::winograd_cache_clear);
  m.def("winograd_cache_set_limit", &porter::winograd_cache_set_limit, nb::arg("bytes"));
  m.def("num_threads", &porter::num_threads);
  m.def("set_num_threads", &porter::set_num_threads, nb::arg("n"));
  porter::bind_conv3d(m);  // conv3d (issue 15): the block above NB_MODULE
  porter::bind_flip_conv_weight(m);
}
