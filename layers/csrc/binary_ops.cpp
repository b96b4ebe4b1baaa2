// Float32 add / subtract / multiply / divide with numpy broadcasting as one native node on Porter's threads
// (binary_kernels.h). The operands are given as they are (no broadcast_to node in front): the kernel reads them
// through stride-0 dims. Gradients are MLX ops (the cotangent summed over each operand's broadcast dims), jvp MLX's
// derivative of the same op, vmap the mapped axes moved first.
#include "binary_kernels.h"
#include "ops_common.h"

namespace porter {

mx::array binary_op(const mx::array& a, const mx::array& b, int op);

namespace {

// `a`'s strides over `shape` (a's dims aligned to its end): 0 along dims a lacks or holds once.
std::vector<int64_t> strides_over(const mx::array& a, const mx::Shape& shape) {
  const int nd = static_cast<int>(shape.size()), off = nd - static_cast<int>(a.ndim());
  std::vector<int64_t> out(static_cast<size_t>(nd), 0);
  for (int d = off; d < nd; ++d) out[d] = a.shape(d - off) == 1 ? 0 : a.strides()[d - off];
  return out;
}

// g (the output's shape) summed down to `shape` (numpy broadcasting undone).
mx::array reduce_to(const mx::array& g, const mx::Shape& shape, mx::Stream s) {
  const int nd = static_cast<int>(g.ndim()), off = nd - static_cast<int>(shape.size());
  std::vector<int> axes;
  for (int d = 0; d < nd; ++d) {
    if (d < off || (shape[d - off] == 1 && g.shape(d) != 1)) axes.push_back(d);
  }
  if (axes.empty()) return g;
  return mx::reshape(mx::sum(g, axes, true, s), shape, s);
}

mx::array reference(const mx::array& a, const mx::array& b, int op, mx::Stream s) {
  switch (static_cast<BinaryOp>(op)) {
    case BinaryOp::kAdd: return mx::add(a, b, s);
    case BinaryOp::kSub: return mx::subtract(a, b, s);
    case BinaryOp::kMul: return mx::multiply(a, b, s);
    default: return mx::divide(a, b, s);
  }
}

}  // namespace

class Binary : public mx::UnaryPrimitive {
 public:
  Binary(mx::Stream s, int op) : mx::UnaryPrimitive(s), op_(op) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    // the output takes an operand's buffer when nothing else holds it (as MLX's binary ops donate): each element is
    // read before the same index is written, and the other operand cannot share a buffer nobody else holds
    bool donated = false;
    for (const auto& x : inputs) {
      if (!donated && x.is_donatable() && x.flags().row_contiguous && x.size() == output.size() &&
          x.data_size() == x.size() && x.dtype() == output.dtype()) {
        output.copy_shared_buffer(x);
        donated = true;
      }
    }
    if (!donated) output.set_data(mx::allocator::malloc(output.nbytes()));
    std::vector<mx::array> outputs{output};
    auto body = [op = op_](auto& in, auto& out) {
      const auto& shape = out[0].shape();
      const std::vector<int64_t> full(shape.begin(), shape.end());
      const auto sa = strides_over(in[0], shape), sb = strides_over(in[1], shape);
      const float* a = in[0].template data<float>();
      const float* b = in[1].template data<float>();
      float* y = out[0].template data<float>();
      if (out[0].size() == 0) return;
      switch (static_cast<BinaryOp>(op)) {
        case BinaryOp::kAdd: return binary_strided<BinaryOp::kAdd>(a, sa, b, sb, y, full);
        case BinaryOp::kSub: return binary_strided<BinaryOp::kSub>(a, sa, b, sb, y, full);
        case BinaryOp::kMul: return binary_strided<BinaryOp::kMul>(a, sa, b, sb, y, full);
        default: return binary_strided<BinaryOp::kDiv>(a, sa, b, sb, y, full);
      }
    };
    dispatch_as_given(stream(), inputs, outputs, body);
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("binary"); }
  const char* name() const override { return "PorterBinary"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return same_type<Binary>(*this, other) && static_cast<const Binary&>(other).op_ == op_;
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    auto s = stream();
    const auto& a = primals[0];
    const auto& b = primals[1];
    const auto& g = cotangents[0];
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      mx::array full = g;
      switch (static_cast<BinaryOp>(op_)) {
        case BinaryOp::kAdd: break;
        case BinaryOp::kSub: full = arg == 0 ? g : mx::negative(g, s); break;
        case BinaryOp::kMul: full = mx::multiply(g, arg == 0 ? b : a, s); break;
        default:  // torch's div backward: g / b, and -g * a / (b * b)
          full = arg == 0 ? mx::divide(g, b, s)
                          : mx::negative(mx::divide(mx::multiply(g, a, s), mx::multiply(b, b, s), s), s);
      }
      grads.push_back(reduce_to(full, primals[arg].shape(), s));
    }
    return grads;
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override {
    auto s = stream();
    const int op = op_;
    auto f = [op, s](const std::vector<mx::array>& in) { return std::vector<mx::array>{reference(in[0], in[1], op, s)}; };
    return jvp_of_reference(f, primals, tangents, argnums, s);
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    auto s = stream();  // each operand as (V or 1, its other dims padded with 1s to the widest's rank)
    int rank = 0;
    for (size_t i = 0; i < 2; ++i) rank = std::max(rank, static_cast<int>(inputs[i].ndim()) - (axes[i] >= 0 ? 1 : 0));
    std::vector<mx::array> in;
    for (size_t i = 0; i < 2; ++i) {
      mx::array x = axes[i] >= 0 ? mx::moveaxis(inputs[i], axes[i], 0, s) : mx::expand_dims(inputs[i], 0, s);
      mx::Shape shape{x.shape(0)};
      for (int d = static_cast<int>(x.ndim()) - 1; d < rank; ++d) shape.push_back(1);
      shape.insert(shape.end(), x.shape().begin() + 1, x.shape().end());
      in.push_back(mx::reshape(x, shape, s));
    }
    return {{binary_op(in[0], in[1], op_)}, {0}};
  }

 private:
  int op_;
};

mx::array binary_op(const mx::array& a, const mx::array& b, int op) {
  auto s = cpu_stream("binary");
  if (op < 0 || op > 3) fail("binary", "op must be 0 (add), 1 (subtract), 2 (multiply) or 3 (divide)");
  if (a.dtype() != mx::float32 || b.dtype() != mx::float32) fail("binary", "a and b must be float32");
  mx::Shape shape;
  try {
    shape = mx::broadcast_shapes(a.shape(), b.shape());
  } catch (const std::exception&) {
    fail("binary", "the shapes of a and b do not broadcast");
  }
  return mx::array(std::move(shape), mx::float32, std::make_shared<Binary>(s, op), {a, b});
}

void bind_binary(nb::module_& m) {
  m.def("binary", &binary_op, nb::arg("a"), nb::arg("b"), nb::arg("op"));
}

}  // namespace porter
