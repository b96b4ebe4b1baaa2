// y = x @ w.T (+ b), float32 (linear_kernels.h), two kernels: x (M, K) with M <= 16 rows (kind kRows: a GEMV per
// row), or any M with a short K (kind kSmallK: a register-tiled GEMM). Gradients are MLX matmuls.
#include "ops_common.h"
#include "linear_kernels.h"

namespace porter {

enum class LinearKind { kRows, kSmallK };

class SmallLinear : public mx::UnaryPrimitive {
 public:
  SmallLinear(mx::Stream s, LinearKind kind) : mx::UnaryPrimitive(s), kind_(kind) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [kind = kind_](auto& in, auto& out) {
      const auto& x = in[0];
      const auto& w = in[1];
      const float* b = in.size() > 2 ? in[2].template data<float>() : nullptr;
      if (kind == LinearKind::kRows) {
        small_linear(x.template data<float>(), x.shape(0), x.shape(1), w.template data<float>(), w.shape(0), b,
                     out[0].template data<float>());
      } else {
        small_k_linear(x.template data<float>(), x.shape(0), x.shape(1), w.template data<float>(), w.shape(0), b,
                       out[0].template data<float>());
      }
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.small_linear] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override {
    return kind_ == LinearKind::kRows ? "PorterSmallLinear" : "PorterSmallKLinear";
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<SmallLinear>(*this, other) && static_cast<const SmallLinear&>(other).kind_ == kind_;
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    auto s = stream();  // mapped: the same product in MLX ops, the vmap axis first
    std::vector<mx::array> in;
    for (size_t i = 0; i < inputs.size(); ++i) {
      in.push_back(axes[i] >= 0 ? mx::moveaxis(inputs[i], axes[i], 0, s) : inputs[i]);
    }
    mx::array y = mx::matmul(in[0], mx::swapaxes(in[1], -1, -2, s), s);
    if (in.size() > 2) {
      y = mx::add(y, axes[2] >= 0 ? mx::expand_dims(in[2], -2, s) : in[2], s);
    }
    return {{y}, {0}};
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    auto s = stream();
    const auto& g = cotangents[0];
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (arg == 0) {
        grads.push_back(mx::matmul(g, primals[1], s));
      } else if (arg == 1) {
        grads.push_back(mx::matmul(mx::transpose(g, s), primals[0], s));
      } else {
        grads.push_back(mx::sum(g, 0, false, s));
      }
    }
    return grads;
  }

 private:
  LinearKind kind_;
};

mx::array linear_op(const mx::array& x, const mx::array& w, const std::optional<mx::array>& b, LinearKind kind,
                    const char* what) {
  auto s = cpu_stream(what);
  if (x.dtype() != mx::float32 || w.dtype() != mx::float32 || (b && b->dtype() != mx::float32)) {
    fail(what, "x, weight and bias must be float32");
  }
  if (x.ndim() != 2) fail(what, "x must be (M, K)");
  if (kind == LinearKind::kRows && x.shape(0) > kSmallLinearRows) fail(what, "x must be (M, K) with M <= 16");
  if (w.ndim() != 2 || w.shape(1) != x.shape(1)) fail(what, "weight must be (O, K) for x's K");
  if (b && (b->ndim() != 1 || b->shape(0) != w.shape(0))) fail(what, "bias must be (O,)");
  std::vector<mx::array> in{x, w};
  if (b) in.push_back(*b);
  return mx::array({x.shape(0), w.shape(0)}, mx::float32, std::make_shared<SmallLinear>(s, kind), std::move(in));
}

mx::array small_linear_op(const mx::array& x, const mx::array& w, const std::optional<mx::array>& b) {
  return linear_op(x, w, b, LinearKind::kRows, "small_linear");
}

mx::array small_k_linear_op(const mx::array& x, const mx::array& w, const std::optional<mx::array>& b) {
  return linear_op(x, w, b, LinearKind::kSmallK, "small_k_linear");
}

void bind_linear(nb::module_& m) {
  m.def("small_linear", &small_linear_op, nb::arg("x"), nb::arg("w"), nb::arg("b").none());
  m.def("small_k_linear", &small_k_linear_op, nb::arg("x"), nb::arg("w"), nb::arg("b").none());
}

}  // namespace porter
