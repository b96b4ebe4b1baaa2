// The kernel of a stride-1 conv's input gradient (weight_flip_kernels.h): w (C_out, *kernel, C_in/G) ->
// (C_in, *kernel, C_out/G), taps reversed, channels swapped per group. Linear and its own inverse for the same G,
// so its VJP and JVP are the same op of the cotangent / tangent; vmap folds the mapped axis into the groups.
#include "ops_common.h"
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
                   {w});
}

void bind_flip_conv_weight(nb::module_& m) {
  m.def("flip_conv_weight", &flip_conv_weight_op, nb::arg("w"), nb::arg("groups") = 1);
}

}  // namespace porter
