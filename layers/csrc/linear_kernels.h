// A Linear layer on a few rows (batch-1/8 classifier heads: AlexNet's and VGG's 9216/25088 -> 4096 layers): MLX's CPU
// matmul hands every shape to BLAS GEMM, which packs (copies) the whole weight before multiplying it by one row, so
// a (1, 9216) x (4096, 9216)^T product streams the 151 MB weight two to three times. Here each output is a dot
// product of a weight row with the input rows, read once, vectorized and split over threads by output rows.
#pragma once

#include <algorithm>
#include <cstdint>

#include "parallel.h"

namespace porter {

// y[m, o] = sum_k x[m, k] * w[o, k] (+ b[o]) for row-major x (M, K), w (O, K), y (M, O), M <= kSmallLinearRows.
// Float32, accumulated in float32 in 16 lanes (summation order differs from BLAS's by rounding only). With M > 1 a
// thread's block of weight rows is re-read per input row from its cache (64 rows of K floats).
constexpr int64_t kSmallLinearRows = 16;

// One input row: four weight rows at a time (four independent accumulator chains and four memory streams).
inline void row_linear(const float* x, int64_t K, const float* w, int64_t begin, int64_t end, const float* b,
                       float* y) {
  constexpr int L = 16;
  int64_t o = begin;
  for (; o + 4 <= end; o += 4) {
    const float* w0 = w + o * K;
    const float* w1 = w0 + K;
    const float* w2 = w1 + K;
    const float* w3 = w2 + K;
    float a0[L] = {}, a1[L] = {}, a2[L] = {}, a3[L] = {};
    int64_t k = 0;
    for (; k + L <= K; k += L) {
      for (int l = 0; l < L; ++l) {
        const float xv = x[k + l];
        a0[l] += xv * w0[k + l];
        a1[l] += xv * w1[k + l];
        a2[l] += xv * w2[k + l];
        a3[l] += xv * w3[k + l];
      }
    }
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (int l = 0; l < L; ++l) {
      s0 += a0[l];
      s1 += a1[l];
      s2 += a2[l];
      s3 += a3[l];
    }
    for (; k < K; ++k) {
      s0 += x[k] * w0[k];
      s1 += x[k] * w1[k];
      s2 += x[k] * w2[k];
      s3 += x[k] * w3[k];
    }
    y[o] = b ? s0 + b[o] : s0;
    y[o + 1] = b ? s1 + b[o + 1] : s1;
    y[o + 2] = b ? s2 + b[o + 2] : s2;
    y[o + 3] = b ? s3 + b[o + 3] : s3;
  }
  for (; o < end; ++o) {
    const float* wr = w + o * K;
    float a[L] = {};
    int64_t k = 0;
    for (; k + L <= K; k += L)
      for (int l = 0; l < L; ++l) a[l] += x[k + l] * wr[k + l];
    float s = 0.0f;
    for (int l = 0; l < L; ++l) s += a[l];
    for (; k < K; ++k) s += x[k] * wr[k];
    y[o] = b ? s + b[o] : s;
  }
}

inline void small_linear(const float* x, int64_t M, int64_t K, const float* w, int64_t O, const float* b, float* y) {
  // blocks of 64 output rows per task: whole weight rows per thread, each row read once for all M input rows
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (O + kBlock - 1) / kBlock;
  parallel_for(blocks, kBlock * K * M, [&](int64_t begin, int64_t end) {
    for (int64_t m = 0; m < M; ++m) {
      row_linear(x + m * K, K, w, begin * kBlock, std::min(O, end * kBlock), b, y + m * O);
    }
  });
}

}  // namespace porter
