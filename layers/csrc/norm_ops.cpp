// Layer and group norm (norm_kernels.h): one forward primitive and one gradient primitive for both; L2 normalisation
// over the last axis (normalize_kernels.h): its forward and gradient primitives; their checked ops.
#include <array>
#include <optional>

#include "ops_common.h"
#include "norm_kernels.h"
#include "normalize_kernels.h"

namespace porter {

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

// y * weight + bias in MLX ops, the primitives' inputs p = (x, [weight], [bias]) as their flags say.
mx::array affine_reference(mx::array y, const std::vector<mx::array>& p, bool has_w, bool has_b, mx::Stream s) {
  if (has_w) y = mx::multiply(y, p[1], s);
  return has_b ? mx::add(y, p[has_w ? 2 : 1], s) : y;
}

// The inputs of a Norm / BatchNormTrain primitive: x, then weight and bias where given, checked against x's channels
// and cast to the compute type.
std::vector<mx::array> norm_inputs(const char* what, const mx::array& x, const std::optional<mx::array>& weight,
                                   const std::optional<mx::array>& bias, mx::Stream s) {
  const int c = x.shape(-1);
  std::vector<mx::array> in{x};
  for (const auto* p : {&weight, &bias}) {
    if (!*p) continue;
    if ((*p)->ndim() != 1 || (*p)->shape(0) != c) fail(what, "weight and bias must be (C,) for x's last axis");
    in.push_back(mx::astype(**p, norm_acc_dtype(x.dtype()), s));
  }
  return in;
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
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override { no_gpu("norm_grad"); }
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
    launch(stream(), inputs, output, [groups = groups_, eps = eps_, hw = has_w_, hb = has_b_](auto& in, auto& out) {
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
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("norm"); }
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
      std::vector<mx::array> in{x};
      for (size_t i = 1; i < inputs.size(); ++i) in.push_back(inputs[i]);
      return {{mx::array(in[0].shape(), in[0].dtype(), std::make_shared<Norm>(s, 0, eps_, has_w_, has_b_), in)},
              {axes[0] == last ? 0 : axes[0]}};
    }
    std::vector<bool> batched(inputs.size(), false);
    batched[0] = true;
    auto build = [&](const std::vector<mx::array>& in) {
      std::vector<mx::array> ins{in[0]};
      for (size_t i = 1; i < in.size(); ++i) ins.push_back(in[i]);
      return std::vector<mx::array>{
          mx::array(in[0].shape(), in[0].dtype(), std::make_shared<Norm>(s, groups_, eps_, has_w_, has_b_), ins)};
    };
    return vmap_into_batch(s, "group_norm", inputs, axes, batched, build);
  }
  // the same function written in MLX ops, differentiated forward by MLX
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override {
    auto s = stream();
    const int groups = groups_;
    const double eps = eps_;
    const bool hw = has_w_, hb = has_b_;
    const mx::Dtype xt = primals[0].dtype(), at = norm_acc_dtype(xt);
    auto f = [=](const std::vector<mx::array>& p) {
      auto y = affine_reference(norm_reference(mx::astype(p[0], at, s), groups, eps, s), p, hw, hb, s);
      return std::vector<mx::array>{mx::astype(y, xt, s)};
    };
    return jvp_of_reference(f, primals, tangents, argnums, s);
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
  std::vector<mx::array> in{x, gc};  // made row-contiguous by NormGrad::eval_cpu
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
  // no mx::contiguous nodes: launch (dispatch_body) makes Norm's inputs row-contiguous
  return mx::array(x.shape(), x.dtype(), std::make_shared<Norm>(s, groups, eps, weight.has_value(), bias.has_value()),
                   norm_inputs(what, x, weight, bias, s));
}

std::vector<mx::array> norm_grad_op(const mx::array& x, const mx::array& g, const std::optional<mx::array>& weight,
                                    int groups, double eps) {
  auto s = cpu_stream("norm_grad");
  std::optional<mx::array> w;
  if (weight) w = mx::astype(*weight, norm_acc_dtype(x.dtype()), s);
  return make_norm_grad(s, groups, eps, x, g, w);
}

// ------------------------------------------------------------------------------------------------ batch norm, batch statistics
// Batch norm with the batch's statistics: GroupNorm's kernel with one group per channel over x (N, *S, C) (batch norm
// passes x viewed as (1, positions, C)), which also writes the per-(n, c) mean and biased variance (for the running
// statistics) in the compute type. Inputs: x, then weight and bias if present (in the compute type). Outputs: y in
// x's dtype (computed in float32 at least, rounded once), mean (N, C), var (N, C). Gradient: NormGrad with one group
// per channel (torch's batch-norm backward, statistics recomputed from x); the mean and variance are not
// differentiated (their cotangents are ignored: batch norm updates its running statistics under stop_gradient).
class BatchNormTrain : public mx::Primitive {
 public:
  BatchNormTrain(mx::Stream s, double eps, bool has_w, bool has_b)
      : mx::Primitive(s), eps_(eps), has_w_(has_w), has_b_(has_b) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [eps = eps_, hw = has_w_, hb = has_b_](auto& in, auto& out) {
      auto [N, S, C] = norm_dims(in[0], 1);
      dispatch_float(in[0].dtype(), "batch_norm_train", [&](auto tag) {
        using T = decltype(tag);
        using A = NormAcc<T>;
        const A* w = hw ? in[1].template data<A>() : nullptr;
        const A* b = hb ? in[hw ? 2 : 1].template data<A>() : nullptr;
        group_norm<T>(in[0].template data<T>(), N, S, C, C, w, b, static_cast<A>(eps), out[0].template data<T>(),
                      out[1].template data<A>(), out[2].template data<A>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override { no_gpu("batch_norm_train"); }
  const char* name() const override { return "PorterBatchNormTrain"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<BatchNormTrain>(*this, other)) return false;
    const auto& o = static_cast<const BatchNormTrain&>(other);
    return o.eps_ == eps_ && o.has_w_ == has_w_ && o.has_b_ == has_b_;
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    std::vector<bool> batched(inputs.size(), false);
    batched[0] = true;
    auto s = stream();
    return vmap_into_batch(s, "batch_norm_train", inputs, axes, batched, [&](const std::vector<mx::array>& in) {
      return make(s, eps_, has_w_, has_b_, in);
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    std::optional<mx::array> w;
    if (has_w_) w = primals[1];
    auto grads = make_norm_grad(stream(), primals[0].shape(-1), eps_, primals[0], cotangents[0], w);
    std::vector<mx::array> out;
    for (int arg : argnums) out.push_back(grads[arg == 0 ? 0 : (arg == 1 && has_w_ ? 1 : 2)]);
    return out;
  }
  // the same function in MLX ops, differentiated forward by MLX
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override {
    auto s = stream();
    const double eps = eps_;
    const bool hw = has_w_, hb = has_b_;
    const mx::Dtype xt = primals[0].dtype(), at = norm_acc_dtype(xt);
    auto f = [=](const std::vector<mx::array>& p) {
      auto [N, S, C] = norm_dims(p[0], 1);
      auto x = mx::reshape(mx::astype(p[0], at, s), {static_cast<int>(N), -1, static_cast<int>(C)}, s);
      auto mean = mx::mean(x, 1, true, s);
      auto d = mx::subtract(x, mean, s);
      auto var = mx::mean(mx::square(d, s), 1, true, s);
      auto y = affine_reference(mx::multiply(d, mx::rsqrt(mx::add(var, mx::array(eps, at), s), s), s), p, hw, hb, s);
      return std::vector<mx::array>{mx::astype(mx::reshape(y, p[0].shape(), s), xt, s), mx::squeeze(mean, 1, s),
                                    mx::squeeze(var, 1, s)};
    };
    return jvp_of_reference(f, primals, tangents, argnums, s);
  }

  static std::vector<mx::array> make(mx::Stream s, double eps, bool hw, bool hb, const std::vector<mx::array>& in) {
    const mx::Dtype at = norm_acc_dtype(in[0].dtype());
    const int n = in[0].shape(0), c = in[0].shape(-1);
    return mx::array::make_arrays({in[0].shape(), {n, c}, {n, c}}, {in[0].dtype(), at, at},
                                  std::make_shared<BatchNormTrain>(s, eps, hw, hb), in);
  }

 private:
  double eps_;
  bool has_w_, has_b_;
};

std::vector<mx::array> batch_norm_train_op(const mx::array& x, const std::optional<mx::array>& weight,
                                           const std::optional<mx::array>& bias, double eps) {
  const char* what = "batch_norm_train";
  auto s = cpu_stream(what);
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail(what, "x must be floating point");
  if (x.ndim() < 2) fail(what, "x must be (N, *spatial, C)");
  if (!(eps >= 0.0)) fail(what, "'eps' must be >= 0");
  if (weight.has_value() != bias.has_value()) fail(what, "weight and bias must be given together");
  return BatchNormTrain::make(s, eps, weight.has_value(), bias.has_value(), norm_inputs(what, x, weight, bias, s));
}

// ------------------------------------------------------------------------------------------------ L2 normalize
// x / max(||x||_2, eps) over the last axis (F.normalize, p = 2), float32/float16/bfloat16. The gradient is
// L2NormalizeGrad (a native pass, torch's autograd formula); its own VJP differentiates the same function written in
// MLX ops (l2_normalize_reference).
mx::array l2_normalize_reference(const mx::array& x, double eps, mx::Stream s) {
  auto xf = mx::astype(x, mx::float32, s);
  auto squares = mx::sum(mx::square(xf, s), -1, true, s);
  auto zero = mx::equal(squares, mx::array(0.0f), s);  // a zero row's norm without sqrt's 0 / 0 gradient
  auto n = mx::where(zero, mx::array(0.0f), mx::sqrt(mx::where(zero, mx::array(1.0f), squares, s), s), s);
  return mx::astype(mx::divide(xf, mx::maximum(n, mx::array(static_cast<float>(eps)), s), s), x.dtype(), s);
}

class L2NormalizeGrad : public mx::UnaryPrimitive {
 public:
  L2NormalizeGrad(mx::Stream s, double eps) : mx::UnaryPrimitive(s), eps_(eps) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch(stream(), inputs, output, [eps = eps_](auto& in, auto& out) {
      const int64_t C = in[0].shape(-1), rows = C ? static_cast<int64_t>(in[0].size()) / C : 0;
      dispatch_float(in[0].dtype(), "l2_normalize_grad", [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, double>) {
          fail("l2_normalize_grad", "float64 is not supported (the layer keeps MLX ops for it)");
        } else {
          l2_normalize_grad_lastdim<T>(in[0].template data<T>(), in[1].template data<T>(), rows, C,
                                       static_cast<float>(eps), out[0].template data<T>());
        }
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("l2_normalize_grad"); }
  const char* name() const override { return "PorterL2NormalizeGrad"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<L2NormalizeGrad>(*this, other) && static_cast<const L2NormalizeGrad&>(other).eps_ == eps_;
  }
  // dx as a function of (x, g), written in MLX ops and differentiated by MLX
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    auto s = stream();
    const double eps = eps_;
    auto h = [=](const std::vector<mx::array>& in) {
      auto f = [=](const std::vector<mx::array>& p) { return std::vector<mx::array>{l2_normalize_reference(p[0], eps, s)}; };
      return mx::vjp(f, {in[0]}, {in[1]}).second;
    };
    auto grads = mx::vjp(h, primals, {cotangents[0]}).second;
    std::vector<mx::array> out;
    for (int arg : argnums) out.push_back(grads[arg]);
    return out;
  }

 private:
  double eps_;
};

class L2Normalize : public mx::UnaryPrimitive {
 public:
  L2Normalize(mx::Stream s, double eps) : mx::UnaryPrimitive(s), eps_(eps) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch(stream(), inputs, output, [eps = eps_](auto& in, auto& out) {
      const int64_t C = in[0].shape(-1), rows = C ? static_cast<int64_t>(in[0].size()) / C : 0;
      dispatch_float(in[0].dtype(), "l2_normalize", [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, double>) {
          fail("l2_normalize", "float64 is not supported (the layer keeps MLX ops for it)");
        } else {
          l2_normalize_lastdim<T>(in[0].template data<T>(), rows, C, static_cast<float>(eps),
                                  out[0].template data<T>());
        }
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("l2_normalize"); }
  const char* name() const override { return "PorterL2Normalize"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<L2Normalize>(*this, other) && static_cast<const L2Normalize&>(other).eps_ == eps_;
  }
  // rows are independent: the mapped axis joins them (moved off the last axis if it is the normalised one)
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    auto s = stream();
    const int last = static_cast<int>(inputs[0].ndim()) - 1;
    mx::array x = axes[0] == last ? mx::moveaxis(inputs[0], last, 0, s) : inputs[0];
    return {{mx::array(x.shape(), x.dtype(), std::make_shared<L2Normalize>(s, eps_), {x})},
            {axes[0] == last ? 0 : axes[0]}};
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>&) override {
    auto s = stream();
    auto g = cast_like(cotangents[0], primals[0], s);
    if (g.shape() != primals[0].shape()) g = mx::broadcast_to(g, primals[0].shape(), s);
    return {mx::array(primals[0].shape(), primals[0].dtype(), std::make_shared<L2NormalizeGrad>(s, eps_),
                      {primals[0], g})};
  }

 private:
  double eps_;
};

void check_l2_normalize(const mx::array& x, double eps, const char* what) {
  if (x.dtype() != mx::float32 && x.dtype() != mx::float16 && x.dtype() != mx::bfloat16) {
    fail(what, "x must be float32, float16 or bfloat16");
  }
  if (x.ndim() < 1) fail(what, "x must have a last axis");
  if (!(eps >= 0.0) || !std::isfinite(eps)) fail(what, "'eps' must be a finite number >= 0");
}

mx::array l2_normalize_op(const mx::array& x, double eps) {
  check_l2_normalize(x, eps, "l2_normalize");
  auto s = cpu_stream("l2_normalize");
  // no mx::contiguous node: launch (dispatch_body) makes L2Normalize's input row-contiguous
  return mx::array(x.shape(), x.dtype(), std::make_shared<L2Normalize>(s, eps), {x});
}

mx::array l2_normalize_grad_op(const mx::array& x, const mx::array& g, double eps) {
  check_l2_normalize(x, eps, "l2_normalize_grad");
  if (g.shape() != x.shape()) fail("l2_normalize_grad", "g must have x's shape");
  auto s = cpu_stream("l2_normalize_grad");
  return mx::array(x.shape(), x.dtype(), std::make_shared<L2NormalizeGrad>(s, eps), {x, cast_like(g, x, s)});
}

void bind_norm(nb::module_& m) {
  m.def("norm", &porter::norm_op, nb::arg("x"), nb::arg("weight").none(), nb::arg("bias").none(), nb::arg("groups"),
        nb::arg("eps"));
  m.def("norm_grad", &porter::norm_grad_op, nb::arg("x"), nb::arg("g"), nb::arg("weight").none(), nb::arg("groups"),
        nb::arg("eps"));
  m.def("batch_norm_train", &porter::batch_norm_train_op, nb::arg("x"), nb::arg("weight").none(),
        nb::arg("bias").none(), nb::arg("eps"));
  m.def("l2_normalize", &porter::l2_normalize_op, nb::arg("x"), nb::arg("eps"));
  m.def("l2_normalize_grad", &porter::l2_normalize_grad_op, nb::arg("x"), nb::arg("g"), nb::arg("eps"));
}

}  // namespace porter
