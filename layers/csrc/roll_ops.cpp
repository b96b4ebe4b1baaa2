// torch.roll over given axes as one native node (roll_kernels.h); a strided input is copied row-contiguous first
// (Porter's threaded copy). VJP rolls the cotangent back, JVP rolls the tangent alike, vmap moves the mapped axis
// first and shifts the axes by one.
#include "ops_common.h"
#include "roll_kernels.h"

namespace porter {

mx::array roll_op(const mx::array& x, const std::vector<int64_t>& shifts, const std::vector<int>& axes);

class Roll : public mx::UnaryPrimitive {
 public:
  Roll(mx::Stream s, std::vector<int64_t> shifts, std::vector<int> axes)
      : mx::UnaryPrimitive(s), shifts_(std::move(shifts)), axes_(std::move(axes)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch(stream(), inputs, output, [shifts = shifts_, axes = axes_](auto& in, auto& out) {
      const auto& x = in[0];
      if (x.size() == 0) return;
      std::vector<int64_t> shape(x.shape().begin(), x.shape().end()), shift(shape.size(), 0);
      for (size_t i = 0; i < axes.size(); ++i) {
        const int64_t n = shape[axes[i]];
        shift[axes[i]] = ((shift[axes[i]] + shifts[i]) % n + n) % n;
      }
      roll_rows(x.template data<char>(), out[0].template data<char>(), shape, shift, x.itemsize());
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("roll"); }
  const char* name() const override { return "PorterRoll"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<Roll>(*this, other)) return false;
    const auto& o = static_cast<const Roll&>(other);
    return o.shifts_ == shifts_ && o.axes_ == axes_;
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>&, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>&) override {
    std::vector<int64_t> back;
    for (auto s : shifts_) back.push_back(-s);
    return {roll_op(cotangents[0], back, axes_)};
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>&, const std::vector<mx::array>& tangents,
                             const std::vector<int>&) override {
    return {roll_op(tangents[0], shifts_, axes_)};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    const mx::array x = mx::moveaxis(inputs[0], axes[0], 0, stream());
    std::vector<int> moved;
    for (int a : axes_) moved.push_back(a + 1);
    return {{roll_op(x, shifts_, moved)}, {0}};
  }

 private:
  std::vector<int64_t> shifts_;
  std::vector<int> axes_;
};

mx::array roll_op(const mx::array& x, const std::vector<int64_t>& shifts, const std::vector<int>& axes) {
  auto s = cpu_stream("roll");
  if (shifts.size() != axes.size()) fail("roll", "shifts and axes must have the same length");
  if (x.ndim() == 0) fail("roll", "x must have at least one dim");
  std::vector<int> norm;
  for (int a : axes) {
    const int nd = static_cast<int>(x.ndim());
    if (a < -nd || a >= nd) fail("roll", "axis " + std::to_string(a) + " is out of range for " + std::to_string(nd) + " dims");
    norm.push_back(a < 0 ? a + nd : a);
  }
  return mx::array(x.shape(), x.dtype(), std::make_shared<Roll>(s, shifts, norm), {x});
}

void bind_roll(nb::module_& m) {
  m.def("roll", &roll_op, nb::arg("x"), nb::arg("shifts"), nb::arg("axes"));
}

}  // namespace porter
