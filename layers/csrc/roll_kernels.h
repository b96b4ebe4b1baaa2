// torch.roll over some axes of a row-contiguous array, as one pass split over Porter's threads: MLX's roll is slices
// and concatenations (two axes: several single-threaded copies), and Swin rolls its feature map before and after
// every shifted-window block. Output element i along a rolled axis of size n reads input element (i - shift) mod n.
// Rows of the last axis are copied whole (the last axis not rolled) or as two pieces (rolled).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "parallel.h"

namespace porter {

// x, out: row-major over `shape` (elements of `item` bytes); shift[d] in [0, shape[d]) (0: axis not rolled).
inline void roll_rows(const char* x, char* out, const std::vector<int64_t>& shape, const std::vector<int64_t>& shift,
                      size_t item) {
  const int nd = static_cast<int>(shape.size());
  const int64_t len = shape[nd - 1], last = shift[nd - 1];
  int64_t rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= shape[d];
  std::vector<int64_t> row_stride(static_cast<size_t>(nd), 1);  // in rows, over dims 0 .. nd - 2
  for (int d = nd - 3; d >= 0; --d) row_stride[d] = row_stride[d + 1] * shape[d + 1];
  const size_t row_bytes = static_cast<size_t>(len) * item;
  parallel_for(rows, len, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t src = 0, rest = r;
      for (int d = 0; d < nd - 1; ++d) {
        const int64_t i = rest / row_stride[d];
        rest %= row_stride[d];
        int64_t j = i - shift[d];
        if (j < 0) j += shape[d];
        src += j * row_stride[d];
      }
      const char* from = x + static_cast<size_t>(src) * row_bytes;
      char* to = out + static_cast<size_t>(r) * row_bytes;
      if (last == 0) {
        std::memcpy(to, from, row_bytes);
      } else {  // out[last:] = x[:len - last], out[:last] = x[len - last:]
        std::memcpy(to + static_cast<size_t>(last) * item, from, static_cast<size_t>(len - last) * item);
        std::memcpy(to, from + static_cast<size_t>(len - last) * item, static_cast<size_t>(last) * item);
      }
    }
  });
}

}  // namespace porter
