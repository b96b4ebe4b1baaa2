// Float32 add / subtract / multiply / divide with numpy broadcasting, split over Porter's threads: MLX's CPU binary
// ops are vectorized but run on the stream's one thread (a residual add of a (8, 56, 56, 256) activation, Swin's
// attention-bias and mask adds over (windows, heads, 49, 49)). Operands are read through their strides over the
// output's shape (0 along a broadcast dim); dims contiguous in all three arrays are merged first, and long rows are
// cut into chunks so a same-shape add (one merged row) still spreads over the threads. Each element is one IEEE
// operation, as MLX's and torch's: the same bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "parallel.h"
#include "strided_copy.h"

namespace porter {

enum class BinaryOp : int { kAdd = 0, kSub, kMul, kDiv };

template <BinaryOp Op>
inline float binary_apply(float a, float b) {
  if constexpr (Op == BinaryOp::kAdd) return a + b;
  if constexpr (Op == BinaryOp::kSub) return a - b;
  if constexpr (Op == BinaryOp::kMul) return a * b;
  return a / b;
}

// One run of `len` outputs: a and b advanced by their (merged) last-dim strides sa, sb (0 = a broadcast scalar).
template <BinaryOp Op>
inline void binary_run(const float* a, int64_t sa, const float* b, int64_t sb, float* out, int64_t len) {
  if (sa == 1 && sb == 1) {
    for (int64_t j = 0; j < len; ++j) out[j] = binary_apply<Op>(a[j], b[j]);
  } else if (sa == 1 && sb == 0) {
    const float v = *b;
    for (int64_t j = 0; j < len; ++j) out[j] = binary_apply<Op>(a[j], v);
  } else if (sa == 0 && sb == 1) {
    const float v = *a;
    for (int64_t j = 0; j < len; ++j) out[j] = binary_apply<Op>(v, b[j]);
  } else {
    for (int64_t j = 0; j < len; ++j) out[j] = binary_apply<Op>(a[j * sa], b[j * sb]);
  }
}

// out (row-major over `shape`) = a op b, a/b element (i...) at sum(i_d * strides_d).
template <BinaryOp Op>
void binary_strided(const float* a, const std::vector<int64_t>& a_strides, const float* b,
                    const std::vector<int64_t>& b_strides, float* out, const std::vector<int64_t>& shape) {
  // dims contiguous over each other in a and b merged (the row-major output always is)
  std::vector<int64_t> sh;
  std::vector<std::vector<int64_t>> merged;
  detail::merge_dims(shape, {a_strides.data(), b_strides.data()}, sh, merged);
  const std::vector<int64_t>& sa = merged[0];
  const std::vector<int64_t>& sb = merged[1];
  const int nd = static_cast<int>(sh.size());
  const int64_t len = sh[nd - 1];
  int64_t rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= sh[d];
  constexpr int64_t kChunk = 1 << 14;
  const int64_t pieces = (len + kChunk - 1) / kChunk, piece_len = (len + pieces - 1) / pieces;
  parallel_for(rows * pieces, std::min(len, piece_len) * 8, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t row = u / pieces, j0 = (u % pieces) * piece_len, j1 = std::min(len, j0 + piece_len);
      int64_t oa = 0, ob = 0, rest = row;
      for (int d = nd - 2; d >= 0; --d) {
        const int64_t i = rest % sh[d];
        rest /= sh[d];
        oa += i * sa[d];
        ob += i * sb[d];
      }
      binary_run<Op>(a + oa + j0 * sa[nd - 1], sa[nd - 1], b + ob + j0 * sb[nd - 1], sb[nd - 1],
                     out + row * len + j0, j1 - j0);
    }
  });
}

}  // namespace porter
