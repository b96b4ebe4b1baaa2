// The 3-d Winograd F(2x2, 3x3) forward of conv3d_kernels.h as ONE cache-blocked pass: transform a block of tiles,
// run its GEMMs, inverse-transform while the block is still in cache. No transformed frame of the whole input (V) or
// output (M) is ever allocated: at batch 8 those were 460 + 410 MB for R3D's 64@16x56x56 convs, and allocating them
// fresh (page faults) cost more than the conv itself (measured 1 thread: 364 ms with the buffers reused, 830-875 ms
// without).
//
//   rows:   r = (n, tile) over all examples and a frame's T tiles, in blocks of `block` rows (a block may span examples)
//   unit:   one row block over a range of output frames; frames run in order and a ring of kD transformed input
//           frames (16, block, C_in) per slot is kept, so each input frame is transformed once per unit
//   GEMMs:  M[p] = sum_j ring[(o + j) % kD][p] @ U[j][p]   (16 * kD sgemm calls per output frame, BLAS row-major)
//   output: M -> y for frame o, tiles that are not finite redone directly (wino3d_direct), as in wino3d_output
// The GEMMs call the BLAS MLX calls (its cblas_sgemm, handed over by layers/_native.py); when that BLAS can be told
// to run single-threaded for the pass (BlasSerialScope), units run on Porter's threads, else on the calling thread
// with the BLAS threading each GEMM.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "conv3d_kernels.h"
#include "parallel.h"
#include "winograd_kernels.h"

namespace porter {

// cblas_sgemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); 101 = row-major, 111 = no trans
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                         int);
using BlasThreadsFn = int (*)(int);
using BlasSetThreadsFn = void (*)(int);
using BlasGetThreadsFn = int (*)();

struct Wino3dBlas {
  SgemmFn sgemm = nullptr;
  BlasThreadsFn set_threads_local = nullptr;  // returns the previous setting
  // process-wide setter and getter (openblas_set/get_num_threads), for builds without the per-thread setter
  // (scipy-openblas 0.3.34, the wheel MLX is handed on Linux)
  BlasSetThreadsFn set_threads = nullptr;
  BlasGetThreadsFn get_threads = nullptr;
  // whether GEMMs can be made single-threaded for calls from Porter's pool threads
  bool can_serialize() const { return set_threads_local != nullptr || (set_threads && get_threads); }
};

// While alive (and `active`), the library's GEMMs run single-threaded wherever they are called from: the count is set
// to 1 once, on the calling thread, before the pool starts, and restored after every pool thread is done (the pass runs
// as one task on MLX's CPU stream thread, the only thread issuing MLX's BLAS calls, which waits for it). The
// process-wide pair (openblas_get/set_num_threads) is preferred: OpenBLAS's openblas_set_num_threads_local sets the
// process-wide count too (cmeel-openblas 0.3.31: one thread's call changed what every thread read back), so pool
// threads that each saved and restored it raced, and a pass could leave the count at 1 for every later GEMM in the
// process (EfficientNetV2-S at batch 1: its 1x1 convs ran on one thread after the first fused 3x3). Only where the
// library has the "local" setter alone is it used, here, on the calling thread.
struct BlasSerialScope {
  const Wino3dBlas& blas;
  enum class How { kNone, kGlobal, kLocal } how = How::kNone;
  int saved = 0;
  BlasSerialScope(const Wino3dBlas& b, bool active) : blas(b) {
    if (!active) return;
    if (b.set_threads && b.get_threads) {
      how = How::kGlobal;
      saved = b.get_threads();
      b.set_threads(1);
    } else if (b.set_threads_local) {
      how = How::kLocal;
      saved = b.set_threads_local(1);
    }
  }
  ~BlasSerialScope() {
    if (how == How::kGlobal) blas.set_threads(saved);
    if (how == How::kLocal) blas.set_threads_local(saved);
  }
  BlasSerialScope(const BlasSerialScope&) = delete;
  BlasSerialScope& operator=(const BlasSerialScope&) = delete;
};

inline Wino3dBlas& wino3d_blas() {
  static Wino3dBlas blas;
  return blas;
}

// Rows [r0, r0 + rows) of frame f (input depth f - lo_d) -> slot (16, block, C): position p at slot + p * block * C.
inline void wino3d_fused_input(const float* x, const Wino3dGeometry& g, int64_t f, int64_t r0, int64_t rows,
                               int64_t block, const float* zeros, float* slot) {
  const int64_t C = g.ci, tw = g.tw(), T = g.tiles();
  const int64_t z = f - g.lo_d;
  const bool empty = z < 0 || z >= g.d;
  for (int64_t k = 0; k < rows; ++k) {
    const int64_t r = r0 + k, n = r / T, i = (r % T) / tw, j = r % tw;
    const float* px[4][4];
    for (int a = 0; a < 4; ++a) {
      const int64_t yy = 2 * i - g.lo_h + a;
      for (int b = 0; b < 4; ++b) {
        const int64_t xc = 2 * j - g.lo_w + b;
        px[a][b] = (empty || yy < 0 || yy >= g.h || xc < 0 || xc >= g.w)
                       ? zeros
                       : x + (((n * g.d + z) * g.h + yy) * g.w + xc) * C;
      }
    }
    float* out = slot + k * C;
    int64_t c = 0;
    for (; c + wino::kLanes <= C; c += wino::kLanes) wino::input_tile<wino::f32v>(px, c, out, block * C);
    for (; c < C; ++c) wino::input_tile<float>(px, c, out, block * C);
  }
}

// m (16, block, C_out) of rows [r0, r0 + rows), output frame o -> y (N, D_out, Ho, Wo, C_out).
inline void wino3d_fused_output(const float* m, const float* x, const float* w, const Wino3dGeometry& g, int64_t co,
                                int64_t o, int64_t r0, int64_t rows, int64_t block, float* y) {
  const int64_t tw = g.tw(), T = g.tiles();
  for (int64_t k = 0; k < rows; ++k) {
    const int64_t r = r0 + k, n = r / T, i = (r % T) / tw, j = r % tw;
    float* dst[2][2];
    for (int a = 0; a < 2; ++a) {
      for (int b = 0; b < 2; ++b) {
        const int64_t oy = 2 * i + a, ox = 2 * j + b;
        dst[a][b] = (oy < g.ho && ox < g.wo) ? y + (((n * g.dout + o) * g.ho + oy) * g.wo + ox) * co : nullptr;
      }
    }
    const float* src = m + k * co;
    auto redo = [&](int64_t c0, int64_t c1) {
      for (int a = 0; a < 2; ++a) {
        for (int b = 0; b < 2; ++b) {
          if (dst[a][b]) wino3d_direct(x, w, g, n, o, 2 * i + a, 2 * j + b, c0, c1, dst[a][b]);
        }
      }
    };
    int64_t c = 0;
    for (; c + wino::kLanes <= co; c += wino::kLanes) {
      if (!wino::output_tile<wino::f32v>(src, block * co, c, dst)) redo(c, c + wino::kLanes);
    }
    for (; c < co; ++c) {
      if (!wino::output_tile<float>(src, block * co, c, dst)) redo(c, c + 1);
    }
  }
}

// x (N, D, H, W, C_in), u (kD, 16, C_in, C_out) (wino3d_weight), w (C_out, kD, 3, 3, C_in) -> y (N, D_out, Ho, Wo,
// C_out). `block`: rows per GEMM (clamped to [1, N * T]).
inline void wino3d_fused(const float* x, const float* u, const float* w, const Wino3dGeometry& g, int64_t co,
                         int64_t block, float* y) {
  const Wino3dBlas blas = wino3d_blas();
  const int64_t C = g.ci, kd = g.kd, rows_all = g.n * g.tiles();
  block = std::clamp<int64_t>(block, 1, rows_all);
  const int64_t nb = (rows_all + block - 1) / block;
  block = (rows_all + nb - 1) / nb;  // even blocks
  const bool threaded = blas.can_serialize() && num_threads() > 1;
  // frame ranges per row block: enough units for the threads (each range re-transforms kD - 1 leading frames)
  const int64_t splits = threaded ? std::clamp<int64_t>((2 * num_threads() + nb - 1) / nb, 1, g.dout) : 1;
  const int64_t units = nb * splits;
  const std::vector<float> zeros(static_cast<size_t>(C), 0.0f);
  auto body = [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scratch;  // kept between calls: a few MB per thread, never page-faulted again
    const size_t need = static_cast<size_t>(16 * block * (kd * C + co));
    if (scratch.size() < need) scratch.resize(need);
    float* ring = scratch.data();
    float* m = ring + kd * 16 * block * C;
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t b = unit / splits, s = unit % splits;
      const int64_t r0 = b * block, rows = std::min(block, rows_all - r0);
      const int64_t o0 = g.dout * s / splits, o1 = g.dout * (s + 1) / splits;
      for (int64_t o = o0; o < o1; ++o) {
        // frames o .. o + kd - 1 in slots f % kd: all of them at a range's start, then the one new frame
        for (int64_t f = (o == o0 ? o : o + kd - 1); f < o + kd; ++f) {
          wino3d_fused_input(x, g, f, r0, rows, block, zeros.data(), ring + (f % kd) * 16 * block * C);
        }
        for (int64_t p = 0; p < 16; ++p) {
          for (int64_t j = 0; j < kd; ++j) {
            const float* a = ring + ((o + j) % kd) * 16 * block * C + p * block * C;
            const float* bm = u + (j * 16 + p) * C * co;
            blas.sgemm(101, 111, 111, static_cast<int>(rows), static_cast<int>(co), static_cast<int>(C), 1.0f, a,
                       static_cast<int>(C), bm, static_cast<int>(co), j == 0 ? 0.0f : 1.0f, m + p * block * co,
                       static_cast<int>(co));
          }
        }
        wino3d_fused_output(m, x, w, g, co, o, r0, rows, block, y);
      }
    }
  };
  if (threaded) {
    BlasSerialScope serial(blas, true);
    parallel_for(units, 16 * block * kd * C * co * std::max<int64_t>(g.dout / splits, 1), body);
  } else {
    body(0, units);
  }
}

// The weight gradient's Winograd-domain half without whole-input temporaries: dU[j][p] = sum over rows and output
// frames o of V[p](frame o + j)^T @ dM[p](frame o), V as in the forward (a ring of kD transformed input frames per row
// block), dM the output transform's adjoint of gy (wino3d_adjoint_tile) for the block's rows of frame o. Each thread
// sums into its own (kD, 16, C_in, C_out) copy (thread 0 into du), added up at the end; the caller applies
// wino3d_weight_adjoint. x (N, D, H, W, C_in), gy (N, D_out, Ho, Wo, C_out) -> du (kD, 16, C_in, C_out).
inline void wino3d_fused_du(const float* x, const float* gy, const Wino3dGeometry& g, int64_t co, int64_t block,
                            float* du) {
  const Wino3dBlas blas = wino3d_blas();
  const int64_t C = g.ci, kd = g.kd, rows_all = g.n * g.tiles(), tw = g.tw(), T = g.tiles();
  const int64_t size = kd * 16 * C * co;
  block = std::clamp<int64_t>(block, 1, rows_all);
  const int64_t nb = (rows_all + block - 1) / block;
  block = (rows_all + nb - 1) / nb;
  const int threads = blas.can_serialize() ? static_cast<int>(std::min<int64_t>(num_threads(), nb * g.dout)) : 1;
  const int64_t splits = threads > 1 ? std::clamp<int64_t>((2 * threads + nb - 1) / nb, 1, g.dout) : 1;
  const int64_t units = nb * splits;
  const std::vector<float> zeros(static_cast<size_t>(std::max(C, co)), 0.0f);
  std::vector<std::vector<float>> partial(static_cast<size_t>(threads > 1 ? threads - 1 : 0));
  auto body = [&](int t) {
    float* acc = du;
    if (t > 0) {
      partial[t - 1].assign(static_cast<size_t>(size), 0.0f);
      acc = partial[t - 1].data();
    }
    thread_local std::vector<float> scratch;
    const size_t need = static_cast<size_t>(16 * block * (kd * C + co));
    if (scratch.size() < need) scratch.resize(need);
    float* ring = scratch.data();
    float* m = ring + kd * 16 * block * C;
    for (int64_t unit = t; unit < units; unit += threads) {
      const int64_t b = unit / splits, s = unit % splits;
      const int64_t r0 = b * block, rows = std::min(block, rows_all - r0);
      const int64_t o0 = g.dout * s / splits, o1 = g.dout * (s + 1) / splits;
      for (int64_t o = o0; o < o1; ++o) {
        for (int64_t f = (o == o0 ? o : o + kd - 1); f < o + kd; ++f) {
          wino3d_fused_input(x, g, f, r0, rows, block, zeros.data(), ring + (f % kd) * 16 * block * C);
        }
        for (int64_t k = 0; k < rows; ++k) {  // dM rows of frame o
          const int64_t r = r0 + k, n = r / T, i = (r % T) / tw, j = r % tw;
          const float* src[2][2];
          for (int a = 0; a < 2; ++a) {
            for (int c = 0; c < 2; ++c) {
              const int64_t oy = 2 * i + a, ox = 2 * j + c;
              src[a][c] = (oy < g.ho && ox < g.wo) ? gy + (((n * g.dout + o) * g.ho + oy) * g.wo + ox) * co
                                                   : zeros.data();
            }
          }
          float* out = m + k * co;
          int64_t c = 0;
          for (; c + wino::kLanes <= co; c += wino::kLanes) wino3d_adjoint_tile<wino::f32v>(src, c, out, block * co);
          for (; c < co; ++c) wino3d_adjoint_tile<float>(src, c, out, block * co);
        }
        for (int64_t p = 0; p < 16; ++p) {
          for (int64_t j = 0; j < kd; ++j) {
            const float* a = ring + ((o + j) % kd) * 16 * block * C + p * block * C;
            // 112 = transposed: (rows x C_in)^T @ (rows x C_out), accumulated
            blas.sgemm(101, 112, 111, static_cast<int>(C), static_cast<int>(co), static_cast<int>(rows), 1.0f, a,
                       static_cast<int>(C), m + p * block * co, static_cast<int>(co), 1.0f, acc + (j * 16 + p) * C * co,
                       static_cast<int>(co));
          }
        }
      }
    }
  };
  std::fill(du, du + size, 0.0f);
  if (threads > 1) {
    BlasSerialScope serial(blas, true);
    Pool::get().run(threads, body);
    for (auto& part : partial) {
      for (int64_t i = 0; i < size; ++i) du[i] += part[i];
    }
  } else {
    body(0);
  }
}

}  // namespace porter
