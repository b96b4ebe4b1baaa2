// Concatenation along one axis: every input viewed as (outer, chunk_i) row-major (outer = the product of the dims
// before the axis, chunk_i = the input's product from the axis on), the output as (outer, sum chunk_i); output row
// r is input 0's row r, then input 1's, ... Bits are copied (any dtype), rows split over the threads. MLX's CPU
// concatenate is one single-threaded strided copy per input (3x a plain copy's time for channels-last DenseNet
// feature maps, whose chunks are 32 channels).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "parallel.h"

namespace porter {

// srcs[i]: input i's data; chunks[i]: its row length in bytes; steps[i]: bytes from one of its rows to the next (its
// chunk for a contiguous input, more for a view such as a channel slice x[..., :c]); out: outer rows of sum(chunks).
inline void concat_rows(const std::vector<const uint8_t*>& srcs, const std::vector<int64_t>& chunks,
                        const std::vector<int64_t>& steps, int64_t outer, uint8_t* out) {
  int64_t row = 0;
  for (int64_t c : chunks) row += c;
  parallel_for(outer, row / 4 + 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      uint8_t* dst = out + r * row;
      for (size_t i = 0; i < srcs.size(); ++i) {
        std::memcpy(dst, srcs[i] + r * steps[i], chunks[i]);
        dst += chunks[i];
      }
    }
  });
}

}  // namespace porter
