// torch.matmul of float32 operands (..., M, K) @ (..., K, N) -> (..., M, N), batch dims broadcast as numpy's, as ONE
// graph node whose batch entries are split over Porter's threads (matmul_kernels.h). An operand is read where it is
// when its matrices are row-major or transposed with any batch strides (`k.transpose(-2, -1)`, a broadcast weight):
// BLAS's transpose flag, no copy; other layouts are copied row-contiguous first. Gradients, jvp and vmap are the same
// op on swapped views.
#include <climits>
#include <cstring>

#include "matmul_kernels.h"
#include "ops_common.h"

namespace porter {
namespace {

struct Layout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 0;
};

// How BLAS reads the last two dims of `a`: row-major (unit column stride) or transposed (unit row stride), with a
// leading dimension that holds a whole row (column) and fits a BLAS int.
Layout matrix_layout(const mx::array& a) {
  const int nd = static_cast<int>(a.ndim());
  const int64_t r = a.shape(nd - 2), c = a.shape(nd - 1);
  const int64_t sr = a.strides()[nd - 2], sc = a.strides()[nd - 1];
  auto fits = [](int64_t ld) { return ld <= INT_MAX; };
  if ((c == 1 || sc == 1) && (r == 1 || sr >= std::max<int64_t>(c, 1))) {
    const int64_t ld = r == 1 ? std::max<int64_t>(c, 1) : sr;
    if (fits(ld)) return {true, false, ld};
  }
  if ((r == 1 || sr == 1) && (c == 1 || sc >= std::max<int64_t>(r, 1))) {
    const int64_t ld = c == 1 ? std::max<int64_t>(r, 1) : sc;
    if (fits(ld)) return {true, true, ld};
  }
  return {};
}

bool blas_readable(const mx::array& a) { return matrix_layout(a).ok; }

// The element offset of each batch entry (row-major over the batch dims, which both operands share after the op's
// broadcast).
MatrixView matrix_view(const mx::array& a) {
  const Layout layout = matrix_layout(a);
  MatrixView v;
  v.trans = layout.trans;
  v.ld = layout.ld;
  const int batch_dims = static_cast<int>(a.ndim()) - 2;
  int64_t entries = 1;
  for (int d = 0; d < batch_dims; ++d) entries *= a.shape(d);
  v.offsets.resize(static_cast<size_t>(entries));
  std::vector<int64_t> index(static_cast<size_t>(batch_dims), 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < entries; ++i) {
    v.offsets[static_cast<size_t>(i)] = offset;
    for (int d = batch_dims - 1; d >= 0; --d) {  // odometer step, the offset kept in step
      if (++index[d] < a.shape(d)) {
        offset += a.strides()[d];
        break;
      }
      offset -= a.strides()[d] * (a.shape(d) - 1);
      index[d] = 0;
    }
  }
  return v;
}

mx::array swap_last(const mx::array& a, mx::Stream s) { return mx::swapaxes(a, -1, -2, s); }

}  // namespace

mx::array batched_matmul_op(const mx::array& a, const mx::array& b);

class BatchedMatmul : public mx::UnaryPrimitive {
 public:
  explicit BatchedMatmul(mx::Stream s) : mx::UnaryPrimitive(s) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch_readable(stream(), inputs, output, blas_readable, [](auto& in, auto& out) {
      const auto& a = in[0];
      const auto& b = in[1];
      float* c = out[0].template data<float>();
      const int64_t m = a.shape(-2), k = a.shape(-1), n = b.shape(-1);
      if (out[0].size() == 0) return;
      if (k == 0) {  // an empty sum: zeros, as torch
        std::memset(c, 0, out[0].nbytes());
        return;
      }
      batched_sgemm(a.template data<float>(), matrix_view(a), b.template data<float>(), matrix_view(b), c, m, n, k);
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("batched_matmul"); }
  const char* name() const override { return "PorterBatchedMatmul"; }
  bool is_equivalent(const mx::Primitive& other) const override { return same_type<BatchedMatmul>(*this, other); }

  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    auto s = stream();
    const auto& g = cotangents[0];
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      grads.push_back(arg == 0 ? batched_matmul_op(g, swap_last(primals[1], s))
                               : batched_matmul_op(swap_last(primals[0], s), g));
    }
    return grads;
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override {
    std::optional<mx::array> out;
    for (size_t j = 0; j < argnums.size(); ++j) {
      mx::array term = argnums[j] == 0 ? batched_matmul_op(tangents[j], primals[1])
                                       : batched_matmul_op(primals[0], tangents[j]);
      out = out ? mx::add(*out, term, stream()) : term;
    }
    return {*out};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    auto s = stream();  // the vmap axis first in both (size 1 where not mapped: broadcast)
    auto lead = [&](size_t i) {
      return axes[i] >= 0 ? mx::moveaxis(inputs[i], axes[i], 0, s) : mx::expand_dims(inputs[i], 0, s);
    };
    return {{batched_matmul_op(lead(0), lead(1))}, {0}};
  }
};

mx::array batched_matmul_op(const mx::array& a_in, const mx::array& b_in) {
  const char* what = "batched_matmul";
  auto s = cpu_stream(what);
  if (a_in.dtype() != mx::float32 || b_in.dtype() != mx::float32) fail(what, "a and b must be float32");
  if (a_in.ndim() < 2 || b_in.ndim() < 2) fail(what, "a and b must have at least 2 dims: (..., M, K) and (..., K, N)");
  const int64_t m = a_in.shape(-2), k = a_in.shape(-1), n = b_in.shape(-1);
  if (b_in.shape(-2) != k) {
    fail(what, "a's last dim (" + std::to_string(k) + ") must equal b's second-to-last (" +
                   std::to_string(b_in.shape(-2)) + ")");
  }
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) fail(what, "M, K and N must each fit a BLAS int");
  mx::Shape batch_a(a_in.shape().begin(), a_in.shape().end() - 2), batch_b(b_in.shape().begin(), b_in.shape().end() - 2);
  mx::Shape batch;
  try {
    batch = mx::broadcast_shapes(batch_a, batch_b);
  } catch (const std::exception&) {
    fail(what, "the batch dims of a and b do not broadcast");
  }
  auto full = [&](const mx::array& x, int64_t r, int64_t c) {
    mx::Shape shape = batch;
    shape.push_back(static_cast<int>(r));
    shape.push_back(static_cast<int>(c));
    return x.shape() == shape ? x : mx::broadcast_to(x, shape, s);  // a stride-0 view, no copy
  };
  mx::Shape out = batch;
  out.push_back(static_cast<int>(m));
  out.push_back(static_cast<int>(n));
  return mx::array(std::move(out), mx::float32, std::make_shared<BatchedMatmul>(s), {full(a_in, m, k), full(b_in, k, n)});
}

void bind_matmul(nb::module_& m) {
  m.def("batched_matmul", &batched_matmul_op, nb::arg("a"), nb::arg("b"));
}

}  // namespace porter
