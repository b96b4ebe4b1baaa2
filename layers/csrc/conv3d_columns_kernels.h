// A one-group 3-d conv (float32, any stride, dilation 1) as im2col + GEMM over blocks of output rows, the columns of
// one block at a time in a per-thread scratch buffer (issue 15, run-time memory). MLX's conv_general gathers the
// columns of the whole batch in one buffer allocated when the op is scheduled: R3D-18's 3x7x7/(1,2,2) stem (3 input
// channels) held 88 MB of them per clip, 700 MB at batch 8, and MLX's eval loop schedules (allocates) several such
// ops ahead of the compute. Here the scratch lives only while the op runs, and is reused across calls.
//
//   rows:    r = ((n * D_out + od) * H_out + oh) * W_out + ow, in blocks of `block` rows
//   columns: row r, tap (a, b, c), channel ci at ((a * kH + b) * kW + c) * C_in + ci: x[n, od*sD + a - lo_d,
//            oh*sH + b - lo_h, ow*sW + c - lo_w, ci], zero where that lands outside x (the padding, never stored)
//   GEMM:    y[block rows] = columns @ w^T, w (C_out, kD, kH, kW, C_in) read as (C_out, K), K = kD * kH * kW * C_in
// The GEMMs call the BLAS MLX calls (conv3d_fused_kernels.h's wino3d_blas, handed over by layers/_native.py). Each
// output is the same sum of products as MLX's im2col conv, padding products included (zero columns).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "conv3d_fused_kernels.h"
#include "parallel.h"

namespace porter {

struct Cols3dGeometry {
  int64_t n = 0, d = 0, h = 0, w = 0, ci = 0;  // input (N, D, H, W, C_in)
  int64_t kd = 1, kh = 1, kw = 1;              // kernel
  int64_t sd = 1, sh = 1, sw = 1;              // stride
  int64_t lo_d = 0, lo_h = 0, lo_w = 0;        // padding before
  int64_t dout = 0, ho = 0, wo = 0;            // output
  int64_t block = 1;                           // rows per GEMM
  int64_t taps_k() const { return kd * kh * kw * ci; }
  int64_t rows() const { return n * dout * ho * wo; }
};

// One (depth, row) tap pair of a column row: kW taps of CC channels (CC > 0: a compile-time width, as for RGB stems,
// where a memcpy call per 12-byte tap cost more than the GEMM's share; CC == 0: `C` channels by memcpy).
template <int CC>
inline void cols3d_row_taps(const float* src, const Cols3dGeometry& g, int64_t ow, int64_t C, float* out) {
  for (int64_t c = 0; c < g.kw; ++c) {
    const int64_t xc = ow * g.sw + c - g.lo_w;
    float* o = out + c * C;
    if (xc < 0 || xc >= g.w) {
      std::memset(o, 0, static_cast<size_t>(C) * sizeof(float));
    } else if constexpr (CC > 0) {
      const float* s = src + xc * CC;
      for (int i = 0; i < CC; ++i) o[i] = s[i];
    } else {
      std::memcpy(o, src + xc * C, static_cast<size_t>(C) * sizeof(float));
    }
  }
}

// Rows [r0, r0 + rows) -> columns (rows, K).
template <int CC>
inline void cols3d_gather_rows(const float* x, const Cols3dGeometry& g, int64_t r0, int64_t rows, float* cols) {
  const int64_t C = g.ci, K = g.taps_k();
  for (int64_t k = 0; k < rows; ++k) {
    int64_t r = r0 + k;
    const int64_t ow = r % g.wo;
    r /= g.wo;
    const int64_t oh = r % g.ho;
    r /= g.ho;
    const int64_t od = r % g.dout, n = r / g.dout;
    float* dst = cols + k * K;
    for (int64_t a = 0; a < g.kd; ++a) {
      const int64_t z = od * g.sd + a - g.lo_d;
      for (int64_t b = 0; b < g.kh; ++b) {
        const int64_t yy = oh * g.sh + b - g.lo_h;
        float* out = dst + (a * g.kh + b) * g.kw * C;
        if (z < 0 || z >= g.d || yy < 0 || yy >= g.h) {
          std::memset(out, 0, static_cast<size_t>(g.kw * C) * sizeof(float));
          continue;
        }
        cols3d_row_taps<CC>(x + ((n * g.d + z) * g.h + yy) * g.w * C, g, ow, C, out);
      }
    }
  }
}

inline void cols3d_gather(const float* x, const Cols3dGeometry& g, int64_t r0, int64_t rows, float* cols) {
  switch (g.ci) {
    case 1: cols3d_gather_rows<1>(x, g, r0, rows, cols); break;
    case 2: cols3d_gather_rows<2>(x, g, r0, rows, cols); break;
    case 3: cols3d_gather_rows<3>(x, g, r0, rows, cols); break;
    case 4: cols3d_gather_rows<4>(x, g, r0, rows, cols); break;
    default: cols3d_gather_rows<0>(x, g, r0, rows, cols);
  }
}

// x (N, D, H, W, C_in), w (C_out, kD, kH, kW, C_in) -> y (N, D_out, H_out, W_out, C_out).
inline void cols3d_conv(const float* x, const float* w, const Cols3dGeometry& geometry, int64_t co, float* y) {
  const Wino3dBlas blas = wino3d_blas();
  Cols3dGeometry g = geometry;
  const int64_t K = g.taps_k(), rows_all = g.rows();
  const int64_t block = std::clamp<int64_t>(g.block, 1, std::max<int64_t>(rows_all, 1));
  const int64_t nb = (rows_all + block - 1) / block;
  const bool threaded = blas.can_serialize() && num_threads() > 1;
  auto body = [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scratch;  // kept between calls: one block of columns per thread
    const size_t need = static_cast<size_t>(block * K);
    if (scratch.size() < need) scratch.resize(need);
    for (int64_t b = begin; b < end; ++b) {
      const int64_t r0 = b * block, rows = std::min(block, rows_all - r0);
      cols3d_gather(x, g, r0, rows, scratch.data());
      // y[r0 : r0 + rows] (rows, co) = cols (rows, K) @ w^T; 112 = transposed
      blas.sgemm(101, 111, 112, static_cast<int>(rows), static_cast<int>(co), static_cast<int>(K), 1.0f,
                 scratch.data(), static_cast<int>(K), w, static_cast<int>(K), 0.0f, y + r0 * co, static_cast<int>(co));
    }
  };
  if (threaded) {
    BlasSerialScope serial(blas, true);
    parallel_for(nb, block * K * co, body);
  } else {
    body(0, nb);
  }
}

}  // namespace porter
