// Depthwise convolution (conv_kernels.h): one primitive for the forward pass and both gradients; its checked op.
#include "ops_common.h"
#include "conv_kernels.h"
#include "conv_params.h"

namespace porter {

// One primitive for the three depthwise kernels (conv_kernels.h), in float32 or float64:
//   forward:      (x (N, *L, C), w (C*m, *k, 1)) -> y (N, *O, C*m)
//   input_grad:   (gy (N, *O, m*C) in (m, C) order, w) -> dx (N, *L, C)
//   weight_grad:  (x, gy in (m, C) order) -> dw (C*m, *k, 1)
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
      dispatch_real(in[0].dtype(), "depthwise_conv", [&](auto tag) {
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
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override { no_gpu("depthwise_conv"); }
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
    auto ct = cast_like(cotangents[0], a, s);
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
                                 {in[0], in[1]})};
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

// Depthwise conv of batched channels-last x (N, *L, C) with w (C*m, *k, 1): zero padding lo/hi per dim, stride,
// dilation. float16/bfloat16 run in float32 (the sums accumulate in float32) and are rounded once at the end.
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
  auto xin = mx::astype(x, run, s);
  auto win = mx::astype(w, run, s);
  mx::Shape shape{x.shape(0)};
  for (int64_t o : out) shape.push_back(static_cast<int>(o));
  shape.push_back(w.shape(0));
  auto y = mx::array(shape, run, std::make_shared<DepthwiseConv>(s, std::move(p), DwKind::forward), {xin, win});
  return half ? mx::astype(y, x.dtype(), s) : y;
}

void bind_conv(nb::module_& m) {
  m.def("depthwise_conv", &porter::depthwise_conv_op, nb::arg("x"), nb::arg("w"), nb::arg("stride"), nb::arg("lo"),
        nb::arg("hi"), nb::arg("dilation"));
}

}  // namespace porter
