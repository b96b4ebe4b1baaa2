// Activation primitives (activation_kernels.h): exp, sigmoid, SiLU, tanh, GELU (erf and tanh) and softmax, each with
// its gradient as a native pass too; their checked ops.
#include <array>
#include <optional>
#include <string>

#include "ops_common.h"
#include "activation_kernels.h"
#include "softmax_kernels.h"

namespace porter {

// ------------------------------------------------------------------------------------------------ activations
// Elementwise transcendental activations (csrc/activation_kernels.h): f(x) (Activation) and g * f'(x)
// (ActivationGrad), each one multi-threaded pass; the gradient's own VJP uses f'' built from MLX ops, so second
// derivatives work.
const char* act_name(Act kind) {
  static const char* names[] = {"exp", "sigmoid", "silu", "tanh", "gelu", "gelu_tanh", "hardswish", "hardsigmoid"};
  return names[static_cast<int>(kind)];
}

mx::array make_activation_grad(mx::Stream s, Act kind, const mx::array& x, const mx::array& g);
mx::array make_activation(mx::Stream s, Act kind, const mx::array& x);

// f''(x) in MLX ops, in x's dtype. MLX's CPU exp and sigmoid of a float64 array are only float32-accurate (~1e-7),
// so float64 takes this file's own passes for those (libm in double); other dtypes keep MLX's.
mx::array activation_second(Act kind, const mx::array& x, mx::Stream s) {
  auto dt = x.dtype();
  auto c = [&](double v) { return mx::array(v, dt); };
  const bool wide = dt == mx::float64;
  auto exp = [&](const mx::array& a) { return wide ? make_activation(s, Act::exp, a) : mx::exp(a, s); };
  auto sigmoid = [&](const mx::array& a) { return wide ? make_activation(s, Act::sigmoid, a) : mx::sigmoid(a, s); };
  switch (kind) {
    case Act::exp: return exp(x);
    case Act::sigmoid: {
      auto y = sigmoid(x);  // y (1 - y) (1 - 2y)
      return mx::multiply(mx::multiply(y, mx::subtract(c(1), y, s), s), mx::subtract(c(1), mx::multiply(c(2), y, s), s), s);
    }
    case Act::silu: {
      auto y = sigmoid(x);  // y (1 - y) (2 + x (1 - 2y))
      auto inner = mx::add(c(2), mx::multiply(x, mx::subtract(c(1), mx::multiply(c(2), y, s), s), s), s);
      return mx::multiply(mx::multiply(y, mx::subtract(c(1), y, s), s), inner, s);
    }
    case Act::tanh: {
      auto t = mx::tanh(x, s);  // -2 t (1 - t^2)
      return mx::multiply(mx::multiply(c(-2), t, s), mx::subtract(c(1), mx::square(t, s), s), s);
    }
    case Act::gelu: {  // phi(x) (2 - x^2)
      auto pdf = mx::multiply(exp(mx::multiply(c(-0.5), mx::square(x, s), s)), c(0.39894228040143268), s);
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
    case Act::hardswish:  // torch's double backward: 1/3 strictly inside (-3, 3), else 0
      return mx::where(mx::logical_and(mx::greater(x, c(-3), s), mx::less(x, c(3), s), s), c(1.0 / 3.0), c(0), s);
    case Act::hardsigmoid:
      return mx::zeros_like(x, s);
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
      out.push_back(mx::moveaxis(inputs[i], axes[i], 0, s));
    } else {
      mx::Shape shape = inputs[i].shape();
      shape.insert(shape.begin(), v);
      out.push_back(mx::broadcast_to(mx::expand_dims(inputs[i], 0, s), shape, s));
    }
  }
  return out;
}

class Activation : public mx::UnaryPrimitive {
 public:
  Activation(mx::Stream s, Act kind) : mx::UnaryPrimitive(s), kind_(kind) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch_in_place(stream(), inputs, output, [kind = kind_](auto& in, auto& out) {
      dispatch_float(in[0].dtype(), act_name(kind), [&](auto tag) {
        using T = decltype(tag);
        dispatch_act(kind, [&](auto k) {
          activation<decltype(k)::value, false, T>(in[0].template data<T>(), nullptr,
                                                   static_cast<int64_t>(in[0].size()), out[0].template data<T>());
        });
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("activation"); }
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
                       {inputs[0]})},
            {axes[0]}};
  }

 private:
  Act kind_;
};

class ActivationGrad : public mx::UnaryPrimitive {
 public:
  ActivationGrad(mx::Stream s, Act kind) : mx::UnaryPrimitive(s), kind_(kind) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch(stream(), inputs, output, [kind = kind_](auto& in, auto& out) {
      dispatch_float(in[0].dtype(), act_name(kind), [&](auto tag) {
        using T = decltype(tag);
        dispatch_act(kind, [&](auto k) {
          activation<decltype(k)::value, true, T>(in[0].template data<T>(), in[1].template data<T>(),
                                                  static_cast<int64_t>(in[0].size()), out[0].template data<T>());
        });
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("activation_grad"); }
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

mx::array make_activation(mx::Stream s, Act kind, const mx::array& x) {
  return mx::array(x.shape(), x.dtype(), std::make_shared<Activation>(s, kind), {x});
}

mx::array make_activation_grad(mx::Stream s, Act kind, const mx::array& x, const mx::array& g) {
  auto gc = cast_like(g, x, s);
  if (gc.shape() != x.shape()) gc = mx::broadcast_to(gc, x.shape(), s);
  return mx::array(x.shape(), x.dtype(), std::make_shared<ActivationGrad>(s, kind),
                   {x, gc});
}

Act parse_act(const std::string& name) {
  static const char* names[] = {"exp", "sigmoid", "silu", "tanh", "gelu", "gelu_tanh", "hardswish", "hardsigmoid"};
  for (int i = 0; i < 8; ++i) {
    if (name == names[i]) return static_cast<Act>(i);
  }
  fail("activation", "'kind' must be one of exp, sigmoid, silu, tanh, gelu, gelu_tanh, hardswish, hardsigmoid, got '" + name + "'");
}

mx::array activation_op(const mx::array& x, const std::string& kind) {
  auto s = cpu_stream("activation");
  Act k = parse_act(kind);
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail("activation", "x must be floating point");
  return make_activation(s, k, x);
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

mx::array make_softmax_grad(mx::Stream s, int axis, bool rows, const mx::array& y, const mx::array& g);

class Softmax : public mx::UnaryPrimitive {
 public:
  Softmax(mx::Stream s, int axis, bool rows) : mx::UnaryPrimitive(s), axis_(axis), rows_(rows) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    // in place when x is donated: both kernels read an element (a whole row, for the rows kernel) before writing it
    launch_in_place(stream(), inputs, output, [axis = axis_, rows = rows_](auto& in, auto& out) {
      auto [outer, len, inner] = split_axis(in[0].shape(), axis);
      dispatch_float(in[0].dtype(), "softmax", [&](auto tag) {
        using T = decltype(tag);
        if constexpr (!std::is_same_v<T, double>) {
          if (inner == 1 && rows) {
            softmax_lastdim<T>(in[0].template data<T>(), outer, len, out[0].template data<T>());
            return;
          }
        }
        softmax<T>(in[0].template data<T>(), outer, len, inner, out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("softmax"); }
  const char* name() const override { return "PorterSoftmax"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<Softmax>(*this, other) && static_cast<const Softmax&>(other).axis_ == axis_ &&
           static_cast<const Softmax&>(other).rows_ == rows_;
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>&, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>& outputs) override {
    return {make_softmax_grad(stream(), axis_, rows_, outputs[0], cotangents[0])};
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>&) override {
    auto y = mx::array(primals[0].shape(), primals[0].dtype(), std::make_shared<Softmax>(stream(), axis_, rows_),
                       {primals[0]});
    return {make_softmax_grad(stream(), axis_, rows_, y, tangents[0])};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    int axis = axis_ + (axes[0] >= 0 && axes[0] <= axis_ ? 1 : 0);
    return {{mx::array(inputs[0].shape(), inputs[0].dtype(), std::make_shared<Softmax>(stream(), axis, rows_),
                       {inputs[0]})},
            {axes[0]}};
  }

 private:
  int axis_;
  bool rows_;  // last axis by the vector rows kernel (softmax_kernels.h), else the any-axis kernel
};

class SoftmaxGrad : public mx::UnaryPrimitive {
 public:
  SoftmaxGrad(mx::Stream s, int axis, bool rows) : mx::UnaryPrimitive(s), axis_(axis), rows_(rows) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch(stream(), inputs, output, [axis = axis_, rows = rows_](auto& in, auto& out) {
      auto [outer, len, inner] = split_axis(in[0].shape(), axis);
      dispatch_float(in[0].dtype(), "softmax_grad", [&](auto tag) {
        using T = decltype(tag);
        if constexpr (!std::is_same_v<T, double>) {
          if (inner == 1 && rows) {
            softmax_grad_lastdim<T>(in[0].template data<T>(), in[1].template data<T>(), outer, len,
                                    out[0].template data<T>());
            return;
          }
        }
        softmax_grad<T>(in[0].template data<T>(), in[1].template data<T>(), outer, len, inner,
                        out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("softmax_grad"); }
  const char* name() const override { return "PorterSoftmaxGrad"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<SoftmaxGrad>(*this, other) && static_cast<const SoftmaxGrad&>(other).axis_ == axis_ &&
           static_cast<const SoftmaxGrad&>(other).rows_ == rows_;
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
        grads.push_back(make_softmax_grad(s, axis_, rows_, y, c));
      }
    }
    return grads;
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    auto in = vmap_pair(inputs, axes, stream());
    return {{mx::array(in[0].shape(), in[0].dtype(), std::make_shared<SoftmaxGrad>(stream(), axis_ + 1, rows_), in)},
            {0}};
  }

 private:
  int axis_;
  bool rows_;
};

mx::array make_softmax_grad(mx::Stream s, int axis, bool rows, const mx::array& y, const mx::array& g) {
  auto gc = cast_like(g, y, s);
  if (gc.shape() != y.shape()) gc = mx::broadcast_to(gc, y.shape(), s);
  // row-contiguous copies, where needed, are made by SoftmaxGrad::eval_cpu (no graph nodes)
  return mx::array(y.shape(), y.dtype(), std::make_shared<SoftmaxGrad>(s, axis, rows), {y, gc});
}

int check_axis(const mx::array& x, int axis, const char* what) {
  const int nd = static_cast<int>(x.ndim());
  if (nd == 0 || axis < -nd || axis >= nd) {
    fail(what, "'axis' " + std::to_string(axis) + " is out of range for an array of " + std::to_string(nd) + " dims");
  }
  return axis < 0 ? axis + nd : axis;
}

mx::array softmax_op(const mx::array& x, int axis, bool rows) {
  auto s = cpu_stream("softmax");
  const int a = check_axis(x, axis, "softmax");
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail("softmax", "x must be floating point");
  return mx::array(x.shape(), x.dtype(), std::make_shared<Softmax>(s, a, rows), {x});
}

mx::array softmax_grad_op(const mx::array& y, const mx::array& g, int axis, bool rows) {
  auto s = cpu_stream("softmax_grad");
  const int a = check_axis(y, axis, "softmax_grad");
  if (!mx::issubdtype(y.dtype(), mx::floating)) fail("softmax_grad", "y must be floating point");
  return make_softmax_grad(s, a, rows, y, g);
}

void bind_activation(nb::module_& m) {
  m.def("activation", &porter::activation_op, nb::arg("x"), nb::arg("kind"));
  m.def("activation_grad", &porter::activation_grad_op, nb::arg("x"), nb::arg("g"), nb::arg("kind"));
  // rows: last-axis softmax by the vector rows kernel (softmax_kernels.h), else the any-axis one (a benchmark switch)
  m.def("softmax", &porter::softmax_op, nb::arg("x"), nb::arg("axis"), nb::arg("rows") = true);
  m.def("softmax_grad", &porter::softmax_grad_op, nb::arg("y"), nb::arg("g"), nb::arg("axis"),
        nb::arg("rows") = true);
}

}  // namespace porter
