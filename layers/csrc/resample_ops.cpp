// Bilinear 2-d resampling primitive (resample_kernels.h): the forward and its adjoint are one linear primitive with
// two kinds, each the other's VJP (and its own JVP), so first and second derivatives are native passes; vmap folds
// the mapped axis into the batch.
#include "ops_common.h"
#include "resample_kernels.h"

namespace porter {

class Bilinear2d : public mx::UnaryPrimitive {
 public:
  Bilinear2d(mx::Stream s, std::shared_ptr<const LinearAxis> ah, std::shared_ptr<const LinearAxis> aw, bool adjoint)
      : mx::UnaryPrimitive(s), ah_(std::move(ah)), aw_(std::move(aw)), adjoint_(adjoint) {
    if (adjoint_) {
      th_ = std::make_shared<const Taps>(invert_axis(*ah_));
      tw_ = std::make_shared<const Taps>(invert_axis(*aw_));
    }
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch(stream(), inputs, output, [ah = ah_, aw = aw_, th = th_, tw = tw_, adjoint = adjoint_](auto& in, auto& out) {
      const auto& x = in[0];
      dispatch_float(x.dtype(), "bilinear2d", [&](auto tag) {
        using T = decltype(tag);
        if (adjoint) {
          bilinear2d_adjoint<T>(x.template data<T>(), x.shape(0), x.shape(3), *ah, *aw, *th, *tw,
                                out[0].template data<T>());
        } else {
          bilinear2d<T>(x.template data<T>(), x.shape(0), x.shape(3), *ah, *aw, out[0].template data<T>());
        }
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("bilinear2d"); }
  const char* name() const override { return adjoint_ ? "PorterBilinear2dAdjoint" : "PorterBilinear2d"; }
  std::vector<mx::array> vjp(const std::vector<mx::array>&, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>& outputs) override {
    return {build(cotangents[0], !adjoint_)};
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>&, const std::vector<mx::array>& tangents,
                             const std::vector<int>&) override {
    return {build(tangents[0], adjoint_)};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "bilinear2d", inputs, axes, {true},
                           [&](const std::vector<mx::array>& in) { return std::vector<mx::array>{build(in[0], adjoint_)}; });
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<Bilinear2d>(*this, other)) return false;
    const auto& o = static_cast<const Bilinear2d&>(other);
    auto same = [](const LinearAxis& a, const LinearAxis& b) {
      return a.in == b.in && a.i0 == b.i0 && a.i1 == b.i1 && a.l1 == b.l1;
    };
    return o.adjoint_ == adjoint_ && same(*o.ah_, *ah_) && same(*o.aw_, *aw_);
  }

  // forward (adjoint = false): (N, H, W, C) -> (N, Ho, Wo, C); adjoint: (N, Ho, Wo, C) -> (N, H, W, C)
  mx::array build(const mx::array& x, bool adjoint) {
    auto s = stream();
    mx::Shape shape = x.shape();
    shape[1] = static_cast<int>(adjoint ? ah_->in : ah_->out());
    shape[2] = static_cast<int>(adjoint ? aw_->in : aw_->out());
    return mx::array(std::move(shape), x.dtype(), std::make_shared<Bilinear2d>(s, ah_, aw_, adjoint),
                     {x});
  }

 private:
  std::shared_ptr<const LinearAxis> ah_, aw_;
  std::shared_ptr<const Taps> th_, tw_;
  bool adjoint_;
};

std::shared_ptr<const LinearAxis> linear_axis(const char* name, int64_t in, const std::vector<int64_t>& i0,
                                              const std::vector<int64_t>& i1, const std::vector<float>& l1) {
  const std::string n(name);
  if (i0.empty() || i0.size() != i1.size() || i0.size() != l1.size()) {
    fail("bilinear2d", "'" + n + "' tables must be non-empty and of one length");
  }
  if (i0.size() > (1u << 30)) fail("bilinear2d", "'" + n + "' output size is too large");
  for (size_t o = 0; o < i0.size(); ++o) {
    if (i0[o] < 0 || i0[o] >= in || i1[o] < 0 || i1[o] >= in) {
      fail("bilinear2d", "'" + n + "' index out of range [0, " + std::to_string(in) + ")");
    }
    if (!(l1[o] >= 0.0f && l1[o] <= 1.0f)) fail("bilinear2d", "'" + n + "' weights must lie in [0, 1]");
  }
  auto a = std::make_shared<LinearAxis>();
  a->in = in;
  a->i0 = i0;
  a->i1 = i1;
  a->l1 = l1;
  return a;
}

mx::array bilinear2d_op(const mx::array& x, const std::vector<int64_t>& h_i0, const std::vector<int64_t>& h_i1,
                        const std::vector<float>& h_l1, const std::vector<int64_t>& w_i0,
                        const std::vector<int64_t>& w_i1, const std::vector<float>& w_l1) {
  auto s = cpu_stream("bilinear2d");
  if (x.ndim() != 4) fail("bilinear2d", "x must be channels-last (N, H, W, C)");
  if (!mx::issubdtype(x.dtype(), mx::floating)) fail("bilinear2d", "x must be floating point");
  if (x.shape(1) == 0 || x.shape(2) == 0) fail("bilinear2d", "x's spatial dims must be non-empty");
  Bilinear2d p(s, linear_axis("h", x.shape(1), h_i0, h_i1, h_l1), linear_axis("w", x.shape(2), w_i0, w_i1, w_l1),
               false);
  return p.build(x, false);
}

void bind_resample(nb::module_& m) {
  m.def("bilinear2d", &bilinear2d_op, nb::arg("x"), nb::arg("h_i0"), nb::arg("h_i1"), nb::arg("h_l1"),
        nb::arg("w_i0"), nb::arg("w_i1"), nb::arg("w_l1"));
}

}  // namespace porter
