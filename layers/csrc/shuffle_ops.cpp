// Channel shuffle along the last axis (shuffle_kernels.h): the primitive and its checked op. A permutation of the
// last axis: the VJP and JVP shuffle the cotangent / tangent back / alike (the inverse of G groups of K is K groups
// of G), vmap moves a mapped last axis to the front first.
#include "ops_common.h"
#include "shuffle_kernels.h"

namespace porter {

mx::array channel_shuffle_op(const mx::array& x, int64_t groups);

class ChannelShuffle : public mx::UnaryPrimitive {
 public:
  ChannelShuffle(mx::Stream s, int64_t groups) : mx::UnaryPrimitive(s), groups_(groups) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch(stream(), inputs, output, [g = groups_](auto& in, auto& out) {
      const int64_t c = in[0].shape(-1), outer = c ? static_cast<int64_t>(in[0].size()) / c : 0, k = c / g;
      switch (in[0].itemsize()) {
        case 1: return shuffle_rows(in[0].template data<uint8_t>(), out[0].template data<uint8_t>(), outer, g, k);
        case 2: return shuffle_rows(in[0].template data<uint16_t>(), out[0].template data<uint16_t>(), outer, g, k);
        case 4: return shuffle_rows(in[0].template data<uint32_t>(), out[0].template data<uint32_t>(), outer, g, k);
        case 8: return shuffle_rows(in[0].template data<uint64_t>(), out[0].template data<uint64_t>(), outer, g, k);
        default: fail("channel_shuffle", "elements of 1, 2, 4 or 8 bytes only");
      }
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("channel_shuffle"); }
  const char* name() const override { return "PorterChannelShuffle"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<ChannelShuffle>(*this, other) && static_cast<const ChannelShuffle&>(other).groups_ == groups_;
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>&) override {
    const int64_t c = primals[0].shape(-1);
    return {channel_shuffle_op(cast_like(cotangents[0], primals[0], stream()), c / groups_)};
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>&) override {
    return {channel_shuffle_op(cast_like(tangents[0], primals[0], stream()), groups_)};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    const int last = static_cast<int>(inputs[0].ndim()) - 1;
    if (axes[0] == last) return {{channel_shuffle_op(mx::moveaxis(inputs[0], last, 0, stream()), groups_)}, {0}};
    return {{channel_shuffle_op(inputs[0], groups_)}, {axes[0]}};
  }

 private:
  int64_t groups_;
};

mx::array channel_shuffle_op(const mx::array& x, int64_t groups) {
  auto s = cpu_stream("channel_shuffle");
  if (x.ndim() == 0) fail("channel_shuffle", "x must have at least one dim (the channels, last)");
  if (groups < 1) fail("channel_shuffle", "groups must be positive");
  if (x.shape(-1) % groups != 0) {
    fail("channel_shuffle", "groups must divide the last dim (" + std::to_string(x.shape(-1)) + " channels, " +
                                std::to_string(groups) + " groups)");
  }
  return mx::array(x.shape(), x.dtype(), std::make_shared<ChannelShuffle>(s, groups), {x});
}

void bind_shuffle(nb::module_& m) {
  m.def("channel_shuffle", &porter::channel_shuffle_op, nb::arg("x"), nb::arg("groups"));
}

}  // namespace porter
