// y = x @ w.T (+ b), float32, as ONE graph node: x (..., K) read as (M, K) rows, w (O, ...) with O * K elements read
// as (O, K) (a 1x1 conv's (O, 1, 1, K) weight too), y (..., O). Three kernels: M <= 16 rows (kind kRows: a GEMV per
// row, linear_kernels.h), any M with a short K (kind kSmallK: a register-tiled GEMM, linear_kernels.h), or the BLAS
// MLX calls (kind kBlas: its cblas_sgemm, handed over by layers/_native.py, bias copied into y first and added by the
// GEMM's beta = 1 as MLX's addmm does). The same product through MLX ops costs 3-5 nodes (reshapes or MLX's own
// flatten/unflatten, the weight's transpose, the matmul), ~10 us each to run on the CPU stream at batch 1. Gradients
// are MLX matmuls.
#include <cstring>
#include <limits>

#include "ops_common.h"
#include "conv3d_fused_kernels.h"
#include "linear_kernels.h"

namespace porter {

enum class LinearKind { kRows, kSmallK, kBlas };

inline void blas_linear(const float* x, int64_t m, int64_t k, const float* w, int64_t o, const float* b, float* y) {
  if (b) {
    for (int64_t r = 0; r < m; ++r) std::memcpy(y + r * o, b, static_cast<size_t>(o) * sizeof(float));
  }
  // row-major (101), x not transposed (111), w transposed (112): y (m, o) = x (m, k) @ w (o, k)^T
  wino3d_blas().sgemm(101, 111, 112, static_cast<int>(m), static_cast<int>(o), static_cast<int>(k), 1.0f, x,
                      static_cast<int>(k), w, static_cast<int>(k), b ? 1.0f : 0.0f, y, static_cast<int>(o));
}

class SmallLinear : public mx::UnaryPrimitive {
 public:
  SmallLinear(mx::Stream s, LinearKind kind) : mx::UnaryPrimitive(s), kind_(kind) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [kind = kind_](auto& in, auto& out) {
      const auto& x = in[0];
      const auto& w = in[1];
      const float* b = in.size() > 2 ? in[2].template data<float>() : nullptr;
      const int64_t k = x.shape(-1), m = k ? static_cast<int64_t>(x.size()) / k : 0, o = w.shape(0);
      if (m == 0 || o == 0) return;
      if (kind == LinearKind::kRows) {
        small_linear(x.template data<float>(), m, k, w.template data<float>(), o, b, out[0].template data<float>());
      } else if (kind == LinearKind::kSmallK) {
        small_k_linear(x.template data<float>(), m, k, w.template data<float>(), o, b, out[0].template data<float>());
      } else {
        blas_linear(x.template data<float>(), m, k, w.template data<float>(), o, b, out[0].template data<float>());
      }
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.small_linear] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override {
    return kind_ == LinearKind::kRows ? "PorterSmallLinear"
                                      : kind_ == LinearKind::kSmallK ? "PorterSmallKLinear" : "PorterBlasLinear";
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
    // x as (V or 1, M, K), w as (V or 1, O, K): one batched matmul broadcast over the vmap axis
    const int k = inputs[0].shape(-1), o = in[1].shape(axes[1] >= 0 ? 1 : 0);
    mx::array xm = axes[0] >= 0 ? in[0] : mx::expand_dims(in[0], 0, s);
    mx::Shape lead(xm.shape().begin() + 1, xm.shape().end() - 1);
    mx::array x3 = mx::reshape(xm, {xm.shape(0), -1, k}, s);
    mx::array w3 = mx::reshape(in[1], {axes[1] >= 0 ? in[1].shape(0) : 1, o, k}, s);
    mx::array y = mx::matmul(x3, mx::swapaxes(w3, -1, -2, s), s);
    if (in.size() > 2) {
      y = mx::add(y, axes[2] >= 0 ? mx::expand_dims(in[2], 1, s) : in[2], s);
    }
    mx::Shape shape{y.shape(0)};
    shape.insert(shape.end(), lead.begin(), lead.end());
    shape.push_back(o);
    y = mx::reshape(y, shape, s);
    return {{y}, {0}};
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    auto s = stream();
    const auto& x = primals[0];
    const auto& w = primals[1];
    const int k = x.shape(-1), o = w.shape(0);
    const auto w2 = mx::reshape(w, {o, k}, s);
    const auto g2 = mx::reshape(cotangents[0], {-1, o}, s);
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (arg == 0) {
        grads.push_back(mx::reshape(mx::matmul(g2, w2, s), x.shape(), s));
      } else if (arg == 1) {
        grads.push_back(mx::reshape(mx::matmul(mx::transpose(g2, s), mx::reshape(x, {-1, k}, s), s), w.shape(), s));
      } else {
        grads.push_back(mx::sum(g2, 0, false, s));
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
  if (x.ndim() < 1) fail(what, "x must be (..., K)");
  const int64_t k = x.shape(-1), m = k ? static_cast<int64_t>(x.size()) / k : 0;
  if (kind == LinearKind::kRows && m > kSmallLinearRows) fail(what, "x must have at most 16 rows of K");
  if (w.ndim() < 2 || w.shape(0) < 1 || static_cast<int64_t>(w.size()) != w.shape(0) * k) {
    fail(what, "weight must be (O, ...) with O * K elements for x's K");
  }
  if (b && (b->ndim() != 1 || b->shape(0) != w.shape(0))) fail(what, "bias must be (O,)");
  if (kind == LinearKind::kBlas) {
    if (!wino3d_blas().sgemm) fail(what, "no BLAS: call winograd3d_set_blas first");
    const int64_t big = std::numeric_limits<int>::max();
    if (m > big || k > big || w.shape(0) > big) fail(what, "M, K and O must each fit a BLAS int");
  }
  std::vector<mx::array> in{x, w};
  if (b) in.push_back(*b);
  mx::Shape shape = x.shape();
  shape.back() = w.shape(0);
  return mx::array(std::move(shape), mx::float32, std::make_shared<SmallLinear>(s, kind), std::move(in));
}

mx::array small_linear_op(const mx::array& x, const mx::array& w, const std::optional<mx::array>& b) {
  return linear_op(x, w, b, LinearKind::kRows, "small_linear");
}

mx::array small_k_linear_op(const mx::array& x, const mx::array& w, const std::optional<mx::array>& b) {
  return linear_op(x, w, b, LinearKind::kSmallK, "small_k_linear");
}

mx::array blas_linear_op(const mx::array& x, const mx::array& w, const std::optional<mx::array>& b) {
  return linear_op(x, w, b, LinearKind::kBlas, "blas_linear");
}

void bind_linear(nb::module_& m) {
  m.def("blas_linear", &blas_linear_op, nb::arg("x"), nb::arg("w"), nb::arg("b").none());
  m.def("small_linear", &small_linear_op, nb::arg("x"), nb::arg("w"), nb::arg("b").none());
  m.def("small_k_linear", &small_k_linear_op, nb::arg("x"), nb::arg("w"), nb::arg("b").none());
}

}  // namespace porter
