// Flipped, channel-swapped conv weights: the kernel of a stride-1 conv's input gradient.
//
// A stride-1 conv's input gradient is a conv of the output gradient with the kernel reversed along every spatial
// dim and its channels swapped (per group). With the weight w viewed as (G, C_out/G, K, C_in/G) (K = the spatial
// taps, flattened, row-major) the result is (G, C_in/G, K, C_out/G), i.e. (C_in, *kernel, C_out/G):
//   out[g][c][K - 1 - t][o] = w[g][o][t][c]
// MLX builds it as a strided copy of a reversed, transposed view, single-threaded and cache-hostile (measured 6.7 ms
// for a 512x3x3x512 float32 weight); here it is a blocked transpose per tap over the threads. Elements are copied as
// raw bits, so one kernel serves every dtype of the element's size. Applied twice with the same G it is the identity.
#pragma once

#include <algorithm>
#include <cstdint>

#include "parallel.h"

namespace porter {

// w (G, co, k, ci) contiguous -> out (G, ci, k, co); T is an unsigned integer of the element's size.
template <typename T>
inline void flip_swap_weight(const T* w, int64_t groups, int64_t co, int64_t k, int64_t ci, T* out) {
  constexpr int64_t kBlock = 32;
  const int64_t c_blocks = (ci + kBlock - 1) / kBlock;
  parallel_for(groups * k * c_blocks, kBlock * co, [&](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t g = job / (k * c_blocks), t = (job / c_blocks) % k, c0 = (job % c_blocks) * kBlock;
      const int64_t c1 = std::min(ci, c0 + kBlock);
      const T* src = w + g * co * k * ci;
      T* dst = out + g * ci * k * co;
      for (int64_t o0 = 0; o0 < co; o0 += kBlock) {
        const int64_t o1 = std::min(co, o0 + kBlock);
        for (int64_t c = c0; c < c1; ++c) {
          T* d = dst + (c * k + (k - 1 - t)) * co;
          for (int64_t o = o0; o < o1; ++o) d[o] = src[(o * k + t) * ci + c];
        }
      }
    }
  });
}

}  // namespace porter
