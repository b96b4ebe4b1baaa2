// Concatenation along one axis (concat_kernels.h): the primitive and its checked op. Linear: the VJP slices the
// cotangent, the JVP concatenates the tangents (zeros for inputs without one), vmap concatenates along the axis
// after the mapped one.
#include "ops_common.h"
#include "concat_kernels.h"

namespace porter {

mx::array concat_op(const std::vector<mx::array>& arrays, int axis);

class Concat : public mx::UnaryPrimitive {
 public:
  Concat(mx::Stream s, int axis) : mx::UnaryPrimitive(s), axis_(axis) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    // an input whose rows are contiguous, one step apart (a channel slice from a split), is read in place by the
    // threaded copy; others are copied row-contiguous first (one thread)
    const int axis = axis_;
    auto readable = [axis](const mx::array& a) { return row_step(a, axis) >= 0; };
    launch_readable(stream(), inputs, output, readable, [axis](auto& in, auto& out) {
      int64_t outer = 1;
      for (int d = 0; d < axis; ++d) outer *= out[0].shape(d);
      std::vector<const uint8_t*> srcs;
      std::vector<int64_t> chunks, steps;
      for (auto& a : in) {
        srcs.push_back(a.template data<uint8_t>());
        int64_t chunk = a.itemsize();
        for (int d = axis; d < static_cast<int>(a.ndim()); ++d) chunk *= a.shape(d);
        chunks.push_back(chunk);
        steps.push_back(row_step(a, axis) * static_cast<int64_t>(a.itemsize()));
      }
      concat_rows(srcs, chunks, steps, outer, out[0].template data<uint8_t>());
    });
  }
  // Elements from one row (the dims before `axis`, flattened) to the next when the dims from `axis` on are
  // row-contiguous and the dims before it collapse to one stride; -1 otherwise.
  static int64_t row_step(const mx::array& a, int axis) {
    const int nd = static_cast<int>(a.ndim());
    int64_t chunk = 1;
    for (int d = nd - 1; d >= axis; --d) {
      if (a.shape(d) != 1 && a.strides()[d] != chunk) return -1;
      chunk *= a.shape(d);
    }
    int64_t step = -1, next = 0;
    for (int d = axis - 1; d >= 0; --d) {
      if (a.shape(d) == 1) continue;
      if (step < 0) {
        step = a.strides()[d];
      } else if (a.strides()[d] != next) {
        return -1;
      }
      next = a.strides()[d] * a.shape(d);
    }
    if (step < 0) step = chunk;  // one row
    return step >= chunk ? step : -1;
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("concat"); }
  const char* name() const override { return "PorterConcat"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<Concat>(*this, other) && static_cast<const Concat&>(other).axis_ == axis_;
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    auto s = stream();
    std::vector<int> starts{0};
    for (auto& p : primals) starts.push_back(starts.back() + p.shape(axis_));
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      mx::Shape lo(cotangents[0].ndim(), 0), hi = cotangents[0].shape();
      lo[axis_] = starts[arg];
      hi[axis_] = starts[arg + 1];
      grads.push_back(cast_like(mx::slice(cotangents[0], lo, hi, s), primals[arg], s));
    }
    return grads;
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override {
    std::vector<mx::array> parts;
    for (size_t i = 0; i < primals.size(); ++i) parts.push_back(mx::zeros_like(primals[i], stream()));
    for (size_t j = 0; j < argnums.size(); ++j) parts[argnums[j]] = cast_like(tangents[j], primals[argnums[j]], stream());
    return {concat_op(parts, axis_)};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    auto s = stream();
    int v = 1;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (axes[i] >= 0) v = inputs[i].shape(axes[i]);
    }
    std::vector<mx::array> moved;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (axes[i] >= 0) {
        moved.push_back(mx::moveaxis(inputs[i], axes[i], 0, s));
      } else {
        mx::Shape shape = inputs[i].shape();
        shape.insert(shape.begin(), v);
        moved.push_back(mx::broadcast_to(mx::expand_dims(inputs[i], 0, s), shape, s));
      }
    }
    return {{concat_op(moved, axis_ + 1)}, {0}};
  }

 private:
  int axis_;
};

mx::array concat_op(const std::vector<mx::array>& arrays, int axis) {
  auto s = cpu_stream("concat");
  if (arrays.empty()) fail("concat", "arrays must hold at least one array");
  const auto& first = arrays.front();
  const int nd = static_cast<int>(first.ndim());
  if (nd == 0) fail("concat", "arrays must have at least one dim");
  if (axis < 0) axis += nd;
  if (axis < 0 || axis >= nd) fail("concat", "axis is out of range for the arrays' rank");
  mx::Shape shape = first.shape();
  shape[axis] = 0;
  std::vector<mx::array> inputs;
  for (auto& a : arrays) {
    if (static_cast<int>(a.ndim()) != nd || a.dtype() != first.dtype()) {
      fail("concat", "arrays must share rank and dtype");
    }
    for (int d = 0; d < nd; ++d) {
      if (d != axis && a.shape(d) != first.shape(d)) fail("concat", "arrays must match in every dim but the axis");
    }
    shape[axis] += a.shape(axis);
    inputs.push_back(a);
  }
  return mx::array(std::move(shape), first.dtype(), std::make_shared<Concat>(s, axis), std::move(inputs));
}

void bind_concat(nb::module_& m) { m.def("concat", &porter::concat_op, nb::arg("arrays"), nb::arg("axis")); }

}  // namespace porter
