// Affine dequantization (quantize_kernels.h): one primitive with the scales' and biases' gradients; its checked op.
#include "ops_common.h"
#include "quantize_kernels.h"

namespace porter {

// ------------------------------------------------------------------------------------------------ dequantize
// MLX's affine dequantize of a float32 (rows, K) matrix in one multi-threaded pass (quantize_kernels.h). Gradients
// to the scales and biases as mx.dequantize has them (sum over a group of g * q, of g); none to the packed weight.
class DequantizeAffine : public mx::UnaryPrimitive {
 public:
  DequantizeAffine(mx::Stream s, int group_size, int bits) : mx::UnaryPrimitive(s), group_size_(group_size),
                                                             bits_(bits) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch(stream(), inputs, output, [gs = group_size_, bits = bits_](auto& in, auto& out) {
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
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("dequantize_affine"); }
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
                   {w, scales, biases});
}

void bind_quantize(nb::module_& m) {
  m.def("dequantize_affine", &porter::dequantize_affine_op, nb::arg("w"), nb::arg("scales"), nb::arg("biases"),
        nb::arg("group_size"), nb::arg("bits"));
}

}  // namespace porter
