// Elementwise primitives (elementwise_kernels.h): eval batch norm's channel affine (+ ReLU or hardswish), ReLU, and LP pooling's
// root; their checked ops.
#include "ops_common.h"
#include "elementwise_kernels.h"

namespace porter {

mx::array make_activation_grad(mx::Stream s, Act kind, const mx::array& x, const mx::array& g);  // activation_ops

class ChannelAffine : public mx::Primitive {
 public:
  ChannelAffine(mx::Stream s, AffineAct act) : mx::Primitive(s), act_(act) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch_in_place(stream(), inputs, outputs[0], [act = act_](auto& in, auto& out) {
      const auto& x = in[0];
      const int64_t C = x.ndim() ? x.shape(-1) : 1, rows = C ? x.size() / C : 0;
      dispatch_float(x.dtype(), "channel_affine", [&](auto tag) {
        using T = decltype(tag);
        channel_affine<T>(x.template data<T>(), rows, C, in[1].template data<float>(), in[2].template data<float>(),
                          act, out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override { no_gpu("channel_affine"); }
  const char* name() const override {
    static const char* names[] = {"PorterChannelAffine", "PorterChannelAffineRelu", "PorterChannelAffineRelu6",
                                  "PorterChannelAffineActivation"};
    return names[static_cast<int>(act_.clamp)];
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<ChannelAffine>(*this, other) && static_cast<const ChannelAffine&>(other).act_ == act_;
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "channel_affine", inputs, axes, {true, false, false},
                           [&](const std::vector<mx::array>& in) {
      return std::vector<mx::array>{mx::array(in[0].shape(), in[0].dtype(),
                                              std::make_shared<ChannelAffine>(stream(), act_),
                                              {mx::contiguous(in[0], false, stream()), in[1], in[2]})};
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override {
    auto s = stream();
    const auto& x = primals[0];
    mx::array g = mx::astype(cotangents[0], mx::float32, s);
    if (act_.clamp == AffineAct::relu) {  // torch's relu backward: the gradient where the output is positive
      g = mx::where(mx::greater(outputs[0], mx::array(0.0f), s), g, mx::array(0.0f), s);
    } else if (act_.clamp != AffineAct::none) {  // torch's backward at the stored batch-norm output z
      auto z = mx::add(mx::multiply(mx::astype(x, mx::float32, s), primals[1], s), primals[2], s);
      z = mx::astype(mx::astype(z, x.dtype(), s), mx::float32, s);
      if (act_.clamp == AffineAct::relu6) {  // hardtanh_backward: 0 where z <= 0 or z >= 6
        auto inside = mx::logical_and(mx::greater(z, mx::array(0.0f), s), mx::less(z, mx::array(6.0f), s), s);
        g = mx::where(inside, g, mx::array(0.0f), s);
      } else {
        g = make_activation_grad(s, act_.act, z, g);
      }
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
  AffineAct act_;
};

class Relu : public mx::UnaryPrimitive {
 public:
  explicit Relu(mx::Stream s) : mx::UnaryPrimitive(s) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch_in_place(stream(), inputs, output, [](auto& in, auto& out) {
      dispatch_float(in[0].dtype(), "relu", [&](auto tag) {
        using T = decltype(tag);
        relu<T>(in[0].template data<T>(), static_cast<int64_t>(in[0].size()), out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("relu"); }
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
    launch(stream(), inputs, output, [scale = scale_, inv_p = inv_p_](auto& in, auto& out) {
      const auto& a = in[0];
      dispatch_real(a.dtype(), "lp_root", [&](auto tag) {
        using T = decltype(tag);
        lp_root<T>(a.template data<T>(), a.size(), static_cast<T>(scale), static_cast<T>(inv_p),
                   out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("lp_root"); }
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

mx::array channel_affine_op(const mx::array& x, const mx::array& alpha, const mx::array& beta,
                            const std::string& activation) {
  auto s = cpu_stream("channel_affine");
  AffineAct act;
  if (activation == "relu") {
    act.clamp = AffineAct::relu;
  } else if (activation == "relu6") {
    act.clamp = AffineAct::relu6;
  } else if (activation != "none") {
    static const char* kinds[] = {"exp", "sigmoid", "silu", "tanh", "gelu", "gelu_tanh", "hardswish", "hardsigmoid"};
    act.clamp = AffineAct::kind;
    int found = -1;
    for (int i = 0; i < 8; ++i) {
      if (activation == kinds[i]) found = i;
    }
    if (found < 0) {
      fail("channel_affine", "'activation' must be none, relu, relu6, exp, sigmoid, silu, tanh, gelu, gelu_tanh, "
                             "hardswish or hardsigmoid, got '" + activation + "'");
    }
    act.act = static_cast<Act>(found);
  }
  if (x.ndim() < 1) fail("channel_affine", "x must have a trailing channel axis");
  const int c = x.shape(-1);
  if (alpha.ndim() != 1 || beta.ndim() != 1 || alpha.shape(0) != c || beta.shape(0) != c) {
    fail("channel_affine", "alpha and beta must be (C,) for x's last axis");
  }
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail("channel_affine", "x must be floating point");
  return mx::array(x.shape(), x.dtype(), std::make_shared<ChannelAffine>(s, act),
                   {mx::contiguous(x, false, s), mx::contiguous(mx::astype(alpha, mx::float32, s), false, s),
                    mx::contiguous(mx::astype(beta, mx::float32, s), false, s)});
}

void bind_elementwise(nb::module_& m) {
  m.def("channel_affine", &porter::channel_affine_op, nb::arg("x"), nb::arg("alpha"), nb::arg("beta"),
        nb::arg("activation") = "none");
  m.def("relu", &porter::relu_op, nb::arg("x"));
  m.def("lp_root", &porter::lp_root_op, nb::arg("a"), nb::arg("scale"), nb::arg("inv_p"));
}

}  // namespace porter
