// Elementwise primitives (elementwise_kernels.h): eval batch norm's channel affine (+ ReLU, ReLU6 or an activation)
// and its backward, the channel affine with a residual add (+ ReLU), ReLU and its backward, hardtanh (ReLU6) and its backward, and LP pooling's root; their checked ops.
#include "ops_common.h"
#include "elementwise_kernels.h"

namespace porter {

mx::array make_activation_grad(mx::Stream s, Act kind, const mx::array& x, const mx::array& g);  // activation_ops
mx::array relu_grad_op(const mx::array& g, const mx::array& y, mx::Stream s);
mx::array hardtanh_grad_arr(const mx::array& g, const mx::array& x, double lo, double hi, mx::Stream s);
std::vector<mx::array> channel_affine_grad_arr(const mx::array& x, const mx::array& alpha, const mx::array& g,
                                               mx::Stream s);

// torch's relu backward as one threaded pass: dx = y <= 0 ? 0 : g (y: relu's output). Linear in g; its own VJP
// masks the cotangent the same way (no gradient to y: the mask is piecewise constant).
class ReluGrad : public mx::UnaryPrimitive {
 public:
  explicit ReluGrad(mx::Stream s) : mx::UnaryPrimitive(s) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch(stream(), inputs, output, [](auto& in, auto& out) {
      dispatch_float(in[0].dtype(), "relu_grad", [&](auto tag) {
        using T = decltype(tag);
        relu_grad<T>(in[0].template data<T>(), in[1].template data<T>(), static_cast<int64_t>(in[0].size()),
                     out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("relu_grad"); }
  const char* name() const override { return "PorterReluGrad"; }
  bool is_equivalent(const mx::Primitive& other) const override { return same_type<ReluGrad>(*this, other); }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    auto s = stream();  // elementwise: bring both to the same mapped layout
    auto a = axes[0] >= 0 ? mx::moveaxis(inputs[0], axes[0], 0, s) : inputs[0];
    auto b = axes[1] >= 0 ? mx::moveaxis(inputs[1], axes[1], 0, s) : inputs[1];
    auto shape = mx::broadcast_shapes(a.shape(), b.shape());
    return {{relu_grad_op(mx::broadcast_to(a, shape, s), mx::broadcast_to(b, shape, s), s)}, {0}};
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      grads.push_back(arg == 0 ? relu_grad_op(cotangents[0], primals[1], stream())
                               : mx::zeros_like(primals[1], stream()));
    }
    return grads;
  }
};

mx::array relu_grad_op(const mx::array& g, const mx::array& y, mx::Stream s) {
  auto gc = cast_like(g, y, s);
  return mx::array(y.shape(), y.dtype(), std::make_shared<ReluGrad>(s), {gc, y});
}

// torch's hardtanh (ReLU6 = hardtanh(0, 6)) as one threaded pass, with torch's backward (hardtanh_backward on the
// input) as another.
class Hardtanh : public mx::Primitive {
 public:
  Hardtanh(mx::Stream s, double lo, double hi, bool grad) : mx::Primitive(s), lo_(lo), hi_(hi), grad_(grad) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [lo = lo_, hi = hi_, grad = grad_](auto& in, auto& out) {
      dispatch_float(in[0].dtype(), "hardtanh", [&](auto tag) {
        using T = decltype(tag);
        const int64_t n = static_cast<int64_t>(in[0].size());
        if (grad) {  // inputs (g, x)
          hardtanh_grad<T>(in[0].template data<T>(), in[1].template data<T>(), n, lo, hi, out[0].template data<T>());
        } else {
          hardtanh<T>(in[0].template data<T>(), n, lo, hi, out[0].template data<T>());
        }
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override { no_gpu("hardtanh"); }
  const char* name() const override { return grad_ ? "PorterHardtanhGrad" : "PorterHardtanh"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<Hardtanh>(*this, other)) return false;
    auto& o = static_cast<const Hardtanh&>(other);
    return lo_ == o.lo_ && hi_ == o.hi_ && grad_ == o.grad_;
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    auto s = stream();
    std::vector<mx::array> in;
    for (size_t i = 0; i < inputs.size(); ++i) in.push_back(axes[i] >= 0 ? mx::moveaxis(inputs[i], axes[i], 0, s) : inputs[i]);
    if (!grad_) return {{make(s, {in[0]})}, {0}};
    auto shape = mx::broadcast_shapes(in[0].shape(), in[1].shape());
    return {{make(s, {mx::broadcast_to(in[0], shape, s), mx::broadcast_to(in[1], shape, s)})}, {0}};
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    auto s = stream();
    const auto& x = primals[grad_ ? 1 : 0];  // both are linear in their first input with the same mask of x
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      grads.push_back(arg == 0 ? hardtanh_grad_arr(cotangents[0], x, lo_, hi_, s) : mx::zeros_like(x, s));
    }
    return grads;
  }
  mx::array make(mx::Stream s, std::vector<mx::array> in) const {
      auto shape = in.back().shape();
    auto dtype = in.back().dtype();
    return mx::array(shape, dtype, std::make_shared<Hardtanh>(s, lo_, hi_, grad_), std::move(in));
  }

 private:
  double lo_, hi_;
  bool grad_;
};

mx::array hardtanh_grad_arr(const mx::array& g, const mx::array& x, double lo, double hi, mx::Stream s) {
  return Hardtanh(s, lo, hi, true).make(s, {cast_like(g, x, s), x});
}

// The backward of ChannelAffine (relu off) as one threaded pass with three outputs (dx in x's dtype, dalpha and
// dbeta float32); second derivatives through MLX ops (the three are bilinear in g and x / alpha).
class ChannelAffineGrad : public mx::Primitive {
 public:
  explicit ChannelAffineGrad(mx::Stream s) : mx::Primitive(s) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [](auto& in, auto& out) {
      const auto& x = in[0];
      const int64_t C = x.ndim() ? x.shape(-1) : 1, rows = C ? x.size() / C : 0;
      dispatch_float(x.dtype(), "channel_affine_grad", [&](auto tag) {
        using T = decltype(tag);
        channel_affine_grad<T>(x.template data<T>(), in[2].template data<T>(), rows, C, in[1].template data<float>(),
                               out[0].template data<T>(), out[1].template data<float>(),
                               out[2].template data<float>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override { no_gpu("channel_affine_grad"); }
  const char* name() const override { return "PorterChannelAffineGrad"; }
  bool is_equivalent(const mx::Primitive& other) const override { return same_type<ChannelAffineGrad>(*this, other); }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    if (axes[1] >= 0) fail("channel_affine_grad", "vmap over alpha is not supported");
    auto s = stream();  // the mapped axis joins the rows of dx; the channel sums add over it too, so keep it apart
    auto x = axes[0] >= 0 ? mx::moveaxis(inputs[0], axes[0], 0, s) : inputs[0];
    auto g = axes[2] >= 0 ? mx::moveaxis(inputs[2], axes[2], 0, s) : inputs[2];
    auto shape = mx::broadcast_shapes(x.shape(), g.shape());
    x = mx::broadcast_to(x, shape, s);
    g = mx::broadcast_to(g, shape, s);
    std::vector<mx::array> dx, da, db;
    for (int k = 0; k < shape[0]; ++k) {
      auto outs = channel_affine_grad_arr(mx::take(x, k, 0, s), inputs[1], mx::take(g, k, 0, s), s);
      dx.push_back(outs[0]);
      da.push_back(outs[1]);
      db.push_back(outs[2]);
    }
    return {{mx::stack(dx, 0, s), mx::stack(da, 0, s), mx::stack(db, 0, s)}, {0, 0, 0}};
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    // outputs dx = g * alpha, da = sum g * x, db = sum g; cotangents (cdx, cda, cdb)
    auto s = stream();
    const auto& x = primals[0];
    const auto& alpha = primals[1];
    auto g = mx::astype(primals[2], mx::float32, s);
    auto cdx = mx::astype(cotangents[0], mx::float32, s);
    std::vector<mx::array> grads;
    std::vector<int> lead;
    for (int d = 0; d + 1 < static_cast<int>(x.ndim()); ++d) lead.push_back(d);
    for (int arg : argnums) {
      if (arg == 0) {  // x: through da
        grads.push_back(mx::astype(mx::multiply(g, cotangents[1], s), x.dtype(), s));
      } else if (arg == 1) {  // alpha: through dx
        grads.push_back(mx::sum(mx::multiply(cdx, g, s), lead, false, s));
      } else {  // g: through all three
        auto xf = mx::astype(x, mx::float32, s);
        auto dg = mx::add(mx::add(mx::multiply(cdx, alpha, s), mx::multiply(xf, cotangents[1], s), s), cotangents[2], s);
        grads.push_back(mx::astype(dg, primals[2].dtype(), s));
      }
    }
    return grads;
  }
};

std::vector<mx::array> channel_affine_grad_arr(const mx::array& x, const mx::array& alpha, const mx::array& g,
                                               mx::Stream s) {
  const int c = x.shape(-1);
  return mx::array::make_arrays(
      {x.shape(), {c}, {c}}, {x.dtype(), mx::float32, mx::float32}, std::make_shared<ChannelAffineGrad>(s),
      {x, mx::astype(alpha, mx::float32, s),
       cast_like(g, x, s)});
}

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
                                              {in[0], in[1], in[2]})};
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override {
    // one native pass for dx, dalpha and dbeta (MLX's multiply / sum ops are single-threaded passes each); with
    // the ReLU, torch's relu backward masks the cotangent first (another native pass)
    auto s = stream();
    const auto& x = primals[0];
    mx::array g = cotangents[0];
    if (act_.clamp == AffineAct::relu) {  // torch's relu backward on the output
      g = relu_grad_op(cotangents[0], outputs[0], s);
    } else if (act_.clamp != AffineAct::none) {  // torch's backward at the stored batch-norm output z
      auto z = mx::add(mx::multiply(mx::astype(x, mx::float32, s), primals[1], s), primals[2], s);
      z = mx::astype(z, x.dtype(), s);
      if (act_.clamp == AffineAct::relu6) {  // hardtanh_backward: 0 where z <= 0 or z >= 6
        g = hardtanh_grad_arr(g, z, 0.0, 6.0, s);
      } else {
        g = make_activation_grad(s, act_.act, mx::astype(z, mx::float32, s), mx::astype(g, mx::float32, s));
      }
    }
    auto outs = channel_affine_grad_arr(x, primals[1], g, s);
    std::vector<mx::array> grads;
    for (int arg : argnums) grads.push_back(outs[arg]);
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
                       {inputs[0]})},
            {axes[0]}};
  }
  bool is_equivalent(const mx::Primitive& other) const override { return same_type<Relu>(*this, other); }
  std::vector<mx::array> vjp(const std::vector<mx::array>&, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>& outputs) override {
    return {relu_grad_op(cotangents[0], outputs[0], stream())};  // torch's threshold_backward on the output
  }
};

mx::array relu_op(const mx::array& x) {
  auto s = cpu_stream("relu");
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail("relu", "x must be floating point");
  return mx::array(x.shape(), x.dtype(), std::make_shared<Relu>(s), {x});
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
                       {inputs[0]})},
            {axes[0]}};
  }

 private:
  double scale_, inv_p_;
};

class ChannelAffineResidual : public mx::UnaryPrimitive {
 public:
  ChannelAffineResidual(mx::Stream s, bool relu) : mx::UnaryPrimitive(s), relu_(relu) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch_in_place(stream(), inputs, output, [relu = relu_](auto& in, auto& out) {
      const auto& x = in[0];
      const int64_t C = x.shape(-1), rows = C ? x.size() / C : 0;
      dispatch_float(x.dtype(), "channel_affine_residual", [&](auto tag) {
        using T = decltype(tag);
        channel_affine_residual<T>(x.template data<T>(), in[3].template data<T>(), rows, C,
                                   in[1].template data<float>(), in[2].template data<float>(), relu,
                                   out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("channel_affine_residual"); }
  const char* name() const override {
    return relu_ ? "PorterChannelAffineResidualRelu" : "PorterChannelAffineResidual";
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<ChannelAffineResidual>(*this, other) &&
           static_cast<const ChannelAffineResidual&>(other).relu_ == relu_;
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "channel_affine_residual", inputs, axes, {true, false, false, true},
                           [&](const std::vector<mx::array>& in) {
      return std::vector<mx::array>{mx::array(in[0].shape(), in[0].dtype(),
                                              std::make_shared<ChannelAffineResidual>(stream(), relu_), in)};
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override {
    // torch's relu backward on the output, then the skip connection's gradient is that cotangent and the batch
    // norm's is the channel affine's (one native pass for dx, dalpha, dbeta)
    auto s = stream();
    const mx::array g = relu_ ? relu_grad_op(cotangents[0], outputs[0], s) : cotangents[0];
    std::vector<mx::array> affine;
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (arg == 3) {
        grads.push_back(cast_like(g, primals[3], s));
        continue;
      }
      if (affine.empty()) affine = channel_affine_grad_arr(primals[0], primals[1], g, s);
      grads.push_back(affine[arg]);
    }
    return grads;
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override {
    auto s = stream();
    const bool relu = relu_;
    auto f = [relu, s](const std::vector<mx::array>& in) {
      auto v = mx::add(mx::add(mx::multiply(mx::astype(in[0], mx::float32, s), in[1], s), in[2], s),
                       mx::astype(in[3], mx::float32, s), s);
      if (relu) v = mx::maximum(v, mx::array(0.0f), s);
      return std::vector<mx::array>{mx::astype(v, in[0].dtype(), s)};
    };
    return jvp_of_reference(f, primals, tangents, argnums, s);
  }

 private:
  bool relu_;
};

mx::array lp_root_op(const mx::array& a, double scale, double inv_p) {
  auto s = cpu_stream("lp_root");
  if (a.dtype() != mx::float32 && a.dtype() != mx::float64) fail("lp_root", "a must be float32 or float64");
  return mx::array(a.shape(), a.dtype(), std::make_shared<LpRoot>(s, scale, inv_p), {a});
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
                   {x, mx::astype(alpha, mx::float32, s),
                    mx::astype(beta, mx::float32, s)});
}

mx::array channel_affine_residual_op(const mx::array& x, const mx::array& alpha, const mx::array& beta,
                                     const mx::array& res, const std::string& activation) {
  const char* what = "channel_affine_residual";
  auto s = cpu_stream(what);
  if (activation != "none" && activation != "relu") fail(what, "'activation' must be none or relu, got '" + activation + "'");
  if (x.ndim() < 1) fail(what, "x must have a trailing channel axis");
  const int c = x.shape(-1);
  if (alpha.ndim() != 1 || beta.ndim() != 1 || alpha.shape(0) != c || beta.shape(0) != c) {
    fail(what, "alpha and beta must be (C,) for x's last axis");
  }
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail(what, "x must be floating point");
  if (res.shape() != x.shape() || res.dtype() != x.dtype()) fail(what, "res must have x's shape and dtype");
  return mx::array(x.shape(), x.dtype(), std::make_shared<ChannelAffineResidual>(s, activation == "relu"),
                   {x, mx::astype(alpha, mx::float32, s), mx::astype(beta, mx::float32, s), res});
}

mx::array hardtanh_op(const mx::array& x, double lo, double hi) {
  auto s = cpu_stream("hardtanh");
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail("hardtanh", "x must be floating point");
  if (!(lo <= hi)) fail("hardtanh", "min_val must be less than or equal to max_val");
  return Hardtanh(s, lo, hi, false).make(s, {x});
}

void bind_elementwise(nb::module_& m) {
  m.def("hardtanh", &porter::hardtanh_op, nb::arg("x"), nb::arg("lo"), nb::arg("hi"));
  m.def("channel_affine", &porter::channel_affine_op, nb::arg("x"), nb::arg("alpha"), nb::arg("beta"),
        nb::arg("activation") = "none");
  m.def("relu", &porter::relu_op, nb::arg("x"));
  m.def("channel_affine_residual", &porter::channel_affine_residual_op, nb::arg("x"), nb::arg("alpha"),
        nb::arg("beta"), nb::arg("res"), nb::arg("activation") = "none");
  m.def("lp_root", &porter::lp_root_op, nb::arg("a"), nb::arg("scale"), nb::arg("inv_p"));
}

}  // namespace porter
