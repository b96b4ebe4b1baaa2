// reshape as MLX's (a view of the input's buffer wherever the new shape can be read with strides), except that the
// copy a non-contiguous input needs (Swin's window partition and reverse: a permuted view reshaped) is split over
// Porter's threads (strided_copy.h) instead of running on the stream's one thread. The VJP/JVP reshape back/alike;
// vmap moves the mapped axis first.
#include <algorithm>

#include "ops_common.h"

namespace porter {

mx::array reshape_op(const mx::array& x, mx::Shape shape);

namespace {

// MLX's rule (backend/common prepare_reshape, not exported): the input's contiguous dims merged, then each output
// dim carved out of them in order; a dim that does not divide what is left needs a copy. Returns whether a copy is
// needed and, if not, the output's strides over the input's buffer.
std::pair<bool, mx::Strides> view_strides(const mx::array& in, const mx::array& out) {
  if (in.size() == 0 || in.flags().row_contiguous) return {false, out.strides()};
  if (in.ndim() == 0) return {false, mx::Strides(out.ndim(), 0)};
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> merged;
  detail::merge_dims(in.shape(), {in.strides().data()}, shape, merged);
  const std::vector<int64_t>& strides = merged[0];
  mx::Strides out_strides;
  size_t j = 0;
  for (int i = 0; i < static_cast<int>(out.ndim()); ++i) {
    const int64_t n = out.shape(i);
    if (j < shape.size() && shape[j] % n == 0) {
      shape[j] /= n;
      out_strides.push_back(shape[j] * strides[j]);
      j += (shape[j] == 1);
    } else if (n == 1) {
      out_strides.push_back(out_strides.empty() ? 1 : out_strides.back());
    } else {
      return {true, {}};
    }
  }
  return {false, out_strides};
}

}  // namespace

class Reshape : public mx::UnaryPrimitive {
 public:
  explicit Reshape(mx::Stream s) : mx::UnaryPrimitive(s) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    const auto& in = inputs[0];
    auto [copy, strides] = view_strides(in, output);
    if (!copy) {  // MLX's shared_buffer_reshape
      auto flags = in.flags();
      if (flags.row_contiguous) {
        const auto longest = std::max_element(output.shape().begin(), output.shape().end());
        flags.col_contiguous = output.size() <= 1 || output.size() == static_cast<size_t>(*longest);
      }
      output.copy_shared_buffer(in, strides, flags, in.data_size());
      return;
    }
    launch_readable(stream(), inputs, output, [](const mx::array&) { return true; }, [](auto& in, auto& out) {
      strided_copy(in[0].template data<char>(), out[0].template data<char>(), in[0].shape(), in[0].strides(),
                   in[0].itemsize());
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("reshape"); }
  const char* name() const override { return "PorterReshape"; }
  bool is_equivalent(const mx::Primitive& other) const override {  // compile's merge of equal nodes
    return same_type<Reshape>(*this, other) && static_cast<const Reshape&>(other).shape_ == shape_;
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>&) override {
    return {reshape_op(cotangents[0], primals[0].shape())};
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>&) override {
    (void)primals;
    return {reshape_op(tangents[0], shape_)};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    const mx::array x = axes[0] > 0 ? mx::moveaxis(inputs[0], axes[0], 0, stream()) : inputs[0];
    mx::Shape shape{x.shape(0)};
    shape.insert(shape.end(), shape_.begin(), shape_.end());
    return {{reshape_op(x, shape)}, {0}};
  }
  void set_shape(mx::Shape shape) { shape_ = std::move(shape); }

 private:
  mx::Shape shape_;
};

mx::array reshape_op(const mx::array& x, mx::Shape shape) {
  auto s = cpu_stream("reshape");
  int64_t size = 1;
  for (auto n : shape) {
    if (n < 0) fail("reshape", "sizes must be non-negative (resolve -1 first)");
    size *= n;
  }
  if (size != static_cast<int64_t>(x.size())) {
    fail("reshape", "cannot reshape " + std::to_string(x.size()) + " elements into " + std::to_string(size));
  }
  if (shape == x.shape()) return x;
  auto primitive = std::make_shared<Reshape>(s);
  primitive->set_shape(shape);
  return mx::array(std::move(shape), x.dtype(), primitive, {x});
}

void bind_reshape(nb::module_& m) {
  m.def(
      "reshape", [](const mx::array& x, const std::vector<int>& shape) {
        return reshape_op(x, mx::Shape(shape.begin(), shape.end()));
      },
      nb::arg("x"), nb::arg("shape"));
}

}  // namespace porter
