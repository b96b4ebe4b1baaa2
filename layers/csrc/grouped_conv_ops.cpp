// Grouped (non-depthwise) convolution (grouped_conv_kernels.h): one primitive for the forward pass and both
// gradients; its checked op.
#include "ops_common.h"
#include "conv_params.h"
#include "grouped_conv_kernels.h"

namespace porter {

// ------------------------------------------------------------------------------------------------ grouped conv
// Grouped (non-depthwise) conv (grouped_conv_kernels.h), one primitive for three bilinear loop nests, each the
// others' adjoint (as DepthwiseConv), in float32 or float64:
//   forward:      (x (N, *L, C), w (C_out, *k, C/groups)) -> y (N, *O, C_out)
//   input_grad:   (gy (N, *O, C_out), w) -> dx (N, *L, C)
//   weight_grad:  (x, gy) -> dw (C_out, *k, C/groups)
class GroupedConv : public mx::UnaryPrimitive {
 public:
  GroupedConv(mx::Stream s, DwParams p, int64_t groups, DwKind kind)
      : mx::UnaryPrimitive(s), p_(std::move(p)), groups_(groups), kind_(kind) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch(stream(), inputs, output, [p = p_, groups = groups_, kind = kind_](auto& in, auto& out) {
      const mx::Shape& xs = kind == DwKind::input_grad ? out[0].shape() : in[0].shape();
      const mx::Shape& ys = kind == DwKind::forward ? out[0].shape() : in[kind == DwKind::input_grad ? 0 : 1].shape();
      const DwGeometry g = dw_geometry(p, xs, ys);
      const int64_t cout = ys.back();
      dispatch_real(in[0].dtype(), "grouped_conv", [&](auto tag) {
        using T = decltype(tag);
        const T* a = in[0].template data<T>();
        const T* b = in[1].template data<T>();
        T* o = out[0].template data<T>();
        if (kind == DwKind::forward) grouped_conv<T>(a, b, g, groups, cout, o);
        else if (kind == DwKind::input_grad) grouped_conv_input_grad<T>(a, b, g, groups, cout, o);
        else grouped_conv_weight_grad<T>(a, b, g, groups, cout, o);
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("grouped_conv"); }
  const char* name() const override {
    return kind_ == DwKind::forward ? "PorterGroupedConv"
                                    : (kind_ == DwKind::input_grad ? "PorterGroupedConvInputGrad"
                                                                   : "PorterGroupedConvWeightGrad");
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<GroupedConv>(*this, other)) return false;
    auto& o = static_cast<const GroupedConv&>(other);
    return p_ == o.p_ && groups_ == o.groups_ && kind_ == o.kind_;
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    if (kind_ == DwKind::weight_grad) {
      fail("grouped_conv", "vmap over the weight gradient (per-example weight gradients) is not supported");
    }
    return vmap_into_batch(stream(), "grouped_conv", inputs, axes, {true, false},
                           [&](const std::vector<mx::array>& in) {
                             const bool fwd = kind_ == DwKind::forward;
                             mx::Shape shape{in[0].shape(0)};
                             for (int64_t e : fwd ? p_.out : p_.extent) shape.push_back(static_cast<int>(e));
                             shape.push_back(fwd ? in[1].shape(0) : static_cast<int>(in[1].shape(-1) * groups_));
                             return std::vector<mx::array>{
                                 mx::array(shape, in[0].dtype(), std::make_shared<GroupedConv>(stream(), p_, groups_, kind_),
                                           {in[0], in[1]})};
                           });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    auto s = stream();
    const auto& c = cast_like(cotangents[0], primals[0], s);
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (kind_ == DwKind::forward) {  // y = F(x, w): dx = I(c, w), dw = W(x, c)
        grads.push_back(arg == 0 ? make(DwKind::input_grad, c, primals[1], primals[0].shape())
                                 : make(DwKind::weight_grad, primals[0], c, primals[1].shape()));
      } else if (kind_ == DwKind::input_grad) {  // dx = I(gy, w): d/dgy = F(c, w), d/dw = W(c, gy)
        grads.push_back(arg == 0 ? make(DwKind::forward, c, primals[1], primals[0].shape())
                                 : make(DwKind::weight_grad, c, primals[0], primals[1].shape()));
      } else {  // dw = W(x, gy): d/dx = I(gy, c), d/dgy = F(x, c)
        grads.push_back(arg == 0 ? make(DwKind::input_grad, primals[1], c, primals[0].shape())
                                 : make(DwKind::forward, primals[0], c, primals[1].shape()));
      }
    }
    return grads;
  }

 private:
  mx::array make(DwKind kind, const mx::array& a, const mx::array& b, const mx::Shape& shape) {
    auto s = stream();
    return mx::array(shape, a.dtype(), std::make_shared<GroupedConv>(s, p_, groups_, kind),
                     {a, cast_like(b, a, s)});
  }
  DwParams p_;
  int64_t groups_;
  DwKind kind_;
};

mx::array grouped_conv_op(const mx::array& x, const mx::array& w, const Ints& stride, const Ints& lo, const Ints& hi,
                          const Ints& dilation, int64_t groups) {
  auto s = cpu_stream("grouped_conv");
  check_batched(x, "grouped_conv", "x");
  const size_t nd = x.ndim() - 2;
  if (w.ndim() != x.ndim()) fail("grouped_conv", "w must be (C_out, *kernel, C_in/groups)");
  if (stride.size() != nd || lo.size() != nd || hi.size() != nd || dilation.size() != nd) {
    fail("grouped_conv", "stride, lo, hi and dilation must give one entry per spatial dim of the input");
  }
  if (groups < 1 || x.shape(-1) != w.shape(-1) * groups || w.shape(0) % groups != 0 || w.shape(0) == 0) {
    fail("grouped_conv", "groups must divide C_out, and C_in must be groups * w.shape[-1]");
  }
  if (x.dtype() != w.dtype() || (x.dtype() != mx::float32 && x.dtype() != mx::float64)) {
    fail("grouped_conv", "x and w must both be float32 or both float64");
  }
  DwParams p;
  Ints out;
  for (size_t d = 0; d < nd; ++d) {
    const int64_t k = w.shape(1 + d);
    if (k <= 0 || stride[d] <= 0 || dilation[d] <= 0 || lo[d] < 0 || hi[d] < 0) {
      fail("grouped_conv", "kernel, stride and dilation must be positive and padding non-negative");
    }
    const int64_t span = x.shape(1 + d) + lo[d] + hi[d] - dilation[d] * (k - 1) - 1;
    if (span < 0) fail("grouped_conv", "the kernel is larger than the padded input");
    out.push_back(span / stride[d] + 1);
    p.kernel.push_back(k);
    p.extent.push_back(x.shape(1 + d));
  }
  p.stride = stride;
  p.dilation = dilation;
  p.lo = lo;
  p.out = out;
  mx::Shape shape{x.shape(0)};
  for (int64_t o : out) shape.push_back(static_cast<int>(o));
  shape.push_back(w.shape(0));
  return mx::array(shape, x.dtype(), std::make_shared<GroupedConv>(s, std::move(p), groups, DwKind::forward),
                   {x, w});
}

void bind_grouped_conv(nb::module_& m) {
  m.def("grouped_conv", &porter::grouped_conv_op, nb::arg("x"), nb::arg("w"), nb::arg("stride"), nb::arg("lo"),
        nb::arg("hi"), nb::arg("dilation"), nb::arg("groups"));
}

}  // namespace porter
