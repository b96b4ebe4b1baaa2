// y = x @ w.T (+ b) for x (M, K) with M <= 16 rows, float32 (linear_kernels.h); gradients are MLX matmuls.
#include "ops_common.h"
#include "linear_kernels.h"

namespace porter {

class SmallLinear : public mx::UnaryPrimitive {
 public:
  explicit SmallLinear(mx::Stream s) : mx::UnaryPrimitive(s) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [](auto& in, auto& out) {
      const auto& x = in[0];
      const auto& w = in[1];
      small_linear(x.template data<float>(), x.shape(0), x.shape(1), w.template data<float>(), w.shape(0),
                   in.size() > 2 ? in[2].template data<float>() : nullptr, out[0].template data<float>());
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.small_linear] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override { return "PorterSmallLinear"; }
  bool is_equivalent(const mx::Primitive& other) const override { return same_type<SmallLinear>(*this, other); }
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
};

mx::array small_linear_op(const mx::array& x, const mx::array& w, const std::optional<mx::array>& b) {
  auto s = cpu_stream("small_linear");
  if (x.dtype() != mx::float32 || w.dtype() != mx::float32 || (b && b->dtype() != mx::float32)) {
    fail("small_linear", "x, weight and bias must be float32");
  }
  if (x.ndim() != 2 || x.shape(0) > kSmallLinearRows) fail("small_linear", "x must be (M, K) with M <= 16");
  if (w.ndim() != 2 || w.shape(1) != x.shape(1)) fail("small_linear", "weight must be (O, K) for x's K");
  if (b && (b->ndim() != 1 || b->shape(0) != w.shape(0))) fail("small_linear", "bias must be (O,)");
  std::vector<mx::array> in{mx::contiguous(x, false, s), mx::contiguous(w, false, s)};
  if (b) in.push_back(mx::contiguous(*b, false, s));
  return mx::array({x.shape(0), w.shape(0)}, mx::float32, std::make_shared<SmallLinear>(s), std::move(in));
}

void bind_linear(nb::module_& m) {
  m.def("small_linear", &small_linear_op, nb::arg("x"), nb::arg("w"), nb::arg("b").none());
}

}  // namespace porter
