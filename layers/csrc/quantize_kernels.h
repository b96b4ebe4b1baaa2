// Dequantization of MLX's affine-quantized matrices (mx.quantize): one multi-threaded pass where MLX's CPU
// dequantize is a single-threaded loop (measured ~1.2 ns per weight; a 512x512x3x3 conv weight took 2.8 ms, about
// three times the conv at 7x7). Used by porter.layers.QuantizedConv*d on the CPU, which dequantizes per call.
#pragma once

#include <cstdint>

#include "parallel.h"

namespace porter {

// One group of `words` packed words: dst[i] = s * q[i] + b. GCC contracts `s * q + b` into an fma under its default
// -ffp-contract=fast (gnu++ modes), which rounds once where MLX rounds twice: contraction is off here.
template <int Bits>
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=off")))
#endif
void dequantize_group(const uint32_t* src, int64_t words, float s, float b, float* dst) {
  constexpr int kPerWord = 32 / Bits;
  constexpr uint32_t kMask = (1u << Bits) - 1u;
  for (int64_t i = 0; i < words; ++i) {
    const uint32_t v = src[i];
    for (int t = 0; t < kPerWord; ++t) {
      const float sq = s * static_cast<float>((v >> (Bits * t)) & kMask);
      dst[i * kPerWord + t] = sq + b;
    }
  }
}

// out[r, k] = scales[r, g] * q[r, k] + biases[r, g] with g = k / group_size, for `rows` rows of K weights; q is
// `bits` wide (4 or 8), packed low bits first into uint32 words (MLX's layout: row r holds K * bits / 32 words).
// Multiply, round, add, round: MLX's CPU kernel's numbers bit for bit.
template <int Bits>
void dequantize_affine(const uint32_t* w, const float* scales, const float* biases, int64_t rows, int64_t K,
                       int64_t group_size, float* out) {
  const int64_t groups = K / group_size, words = group_size / (32 / Bits);
  parallel_for(rows * groups, group_size * 4, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {  // groups are contiguous along a row, rows contiguous
      dequantize_group<Bits>(w + g * words, words, scales[g], biases[g], out + g * group_size);
    }
  });
}

}  // namespace porter
