// A Linear layer on a few rows (batch-1/8 classifier heads: AlexNet's and VGG's 9216/25088 -> 4096 layers): MLX's CPU
// matmul hands every shape to BLAS GEMM, which packs (copies) the whole weight before multiplying it by one row, so
// a (1, 9216) x (4096, 9216)^T product streams the 151 MB weight two to three times. Here each output is a dot
// product of a weight row with the input rows, read once, vectorized and split over threads by output rows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "parallel.h"
#include "simd.h"

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

// -------------------------------------------------------------------------------------------------- small K
// y (M, O) = x (M, K) @ w (O, K)^T + b for many rows and a short K (Swin's and ConvNeXt's first-stage 96 -> 288/384,
// ResNet-50's 1x1 64 -> 256 at 56x56): output-bound GEMMs, where OpenBLAS runs 1.3-1.4x torch's time on AMD Zen 3
// (it packs all of x, and MLX's addmm first writes the broadcast bias into y for a beta = 1 GEMM). Here the weight
// is packed into panels of two vectors of output columns (kGemmNR) once per call (O x K floats: small next to
// M x O), each register tile of kGemmMR rows x kGemmNR columns starts from the bias and accumulates K rank-1 updates
// (k in order: one FMA chain per output), and is written once; blocks of x rows stay in L1 while every panel passes
// over them. Float32; each output sums its K products in order of k, as a BLAS micro-kernel does. For a long K the
// weight panels no longer stay in cache (BLAS blocks K): the layer takes this path for K <= its SMALL_K_MAX only.
using GemmVec = float __attribute__((vector_size(kVectorBytes)));
constexpr int kGemmLanes = kVectorBytes / 4;
constexpr int kGemmNR = 2 * kGemmLanes;  // output columns per panel: two vectors
constexpr int kGemmMR = 6;               // rows per register tile: 12 accumulators + 2 weight vectors + 1 broadcast

inline GemmVec gemm_load(const float* p) { GemmVec v; __builtin_memcpy(&v, p, sizeof v); return v; }
inline void gemm_store(float* p, GemmVec v) { __builtin_memcpy(p, &v, sizeof v); }

// wp[p][k][j] = w[p * NR + j][k], zero past O; bp[p * NR + j] = b[o] or 0.
inline void gemm_pack(const float* w, const float* b, int64_t O, int64_t K, float* wp, float* bp) {
  const int64_t panels = (O + kGemmNR - 1) / kGemmNR;
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t j = 0; j < kGemmNR; ++j) {
      const int64_t o = p * kGemmNR + j;
      bp[p * kGemmNR + j] = (o < O && b) ? b[o] : 0.0f;
      float* dst = wp + p * K * kGemmNR + j;
      if (o < O) {
        const float* src = w + o * K;
        for (int64_t k = 0; k < K; ++k) dst[k * kGemmNR] = src[k];
      } else {
        for (int64_t k = 0; k < K; ++k) dst[k * kGemmNR] = 0.0f;
      }
    }
  }
}

template <int R>
inline void gemm_tile(const float* a, int64_t lda, const float* wp, int64_t K, const float* bias, float* c,
                      int64_t ldc, int64_t cols) {
  GemmVec acc0[R], acc1[R];
  const GemmVec b0 = gemm_load(bias), b1 = gemm_load(bias + kGemmLanes);
  for (int i = 0; i < R; ++i) acc0[i] = b0, acc1[i] = b1;
  for (int64_t k = 0; k < K; ++k) {
    const GemmVec w0 = gemm_load(wp + k * kGemmNR), w1 = gemm_load(wp + k * kGemmNR + kGemmLanes);
    for (int i = 0; i < R; ++i) {
      const GemmVec ai = a[i * lda + k] - GemmVec{};  // a broadcast load (x - 0 is x; 0 + x is not for -0)
      acc0[i] += ai * w0;
      acc1[i] += ai * w1;
    }
  }
  if (cols == kGemmNR) {
    for (int i = 0; i < R; ++i) gemm_store(c + i * ldc, acc0[i]), gemm_store(c + i * ldc + kGemmLanes, acc1[i]);
  } else {
    float tmp[kGemmNR];
    for (int i = 0; i < R; ++i) {
      gemm_store(tmp, acc0[i]);
      gemm_store(tmp + kGemmLanes, acc1[i]);
      std::memcpy(c + i * ldc, tmp, cols * sizeof(float));
    }
  }
}

inline void gemm_rows(const float* a, int64_t rows, int64_t lda, const float* wp, int64_t K, const float* bias,
                      float* c, int64_t ldc, int64_t cols) {
  int64_t m = 0;
  for (; m + kGemmMR <= rows; m += kGemmMR) gemm_tile<kGemmMR>(a + m * lda, lda, wp, K, bias, c + m * ldc, ldc, cols);
  switch (rows - m) {
    case 5: gemm_tile<5>(a + m * lda, lda, wp, K, bias, c + m * ldc, ldc, cols); break;
    case 4: gemm_tile<4>(a + m * lda, lda, wp, K, bias, c + m * ldc, ldc, cols); break;
    case 3: gemm_tile<3>(a + m * lda, lda, wp, K, bias, c + m * ldc, ldc, cols); break;
    case 2: gemm_tile<2>(a + m * lda, lda, wp, K, bias, c + m * ldc, ldc, cols); break;
    case 1: gemm_tile<1>(a + m * lda, lda, wp, K, bias, c + m * ldc, ldc, cols); break;
    default: break;
  }
}

inline void small_k_linear(const float* x, int64_t M, int64_t K, const float* w, int64_t O, const float* b, float* y) {
  const int64_t panels = (O + kGemmNR - 1) / kGemmNR;
  std::vector<float> wp(panels * K * kGemmNR), bp(panels * kGemmNR);
  gemm_pack(w, b, O, K, wp.data(), bp.data());
  // blocks of rows whose x stays in L1 while every panel passes over it
  const int64_t block = std::max<int64_t>(kGemmMR, (16384 / (std::max<int64_t>(K, 1) * 4)) / kGemmMR * kGemmMR);
  const int64_t blocks = (M + block - 1) / block;
  parallel_for(blocks, block * K * O * 2, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
      const int64_t m0 = q * block, rows = std::min(block, M - m0);
      for (int64_t p = 0; p < panels; ++p) {
        const int64_t cols = std::min<int64_t>(kGemmNR, O - p * kGemmNR);
        gemm_rows(x + m0 * K, rows, K, wp.data() + p * K * kGemmNR, K, bp.data() + p * kGemmNR,
                  y + m0 * O + p * kGemmNR, O, cols);
      }
    }
  });
}

}  // namespace porter
