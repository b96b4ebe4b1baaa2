// A batch of matrix products C[i] = A[i] @ B[i] (torch.matmul / bmm on 3-d and wider float32 operands): attention's
// scores and weighted values, Swin's window attention, bmm in hand-written blocks. MLX's CPU matmul calls its BLAS
// once per batch entry on the stream's one thread: each small GEMM (Swin-T's 64 windows x 3 heads of 49 x 32 x 49)
// runs single-threaded, and each mid-size one (ViT-B's 197 x 64 x 197 per head) wakes OpenBLAS's threads for a few
// microseconds of work, 96 times per layer at batch 8 (15-20x torch's bmm, which splits the batch over its threads).
// Here the batch entries are split over Porter's pool, each GEMM the BLAS MLX calls (handed over by layers/_native.py)
// made single-threaded for the pass (BlasSerialScope); few large entries keep the BLAS's own threads instead.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "conv3d_fused_kernels.h"
#include "parallel.h"

namespace porter {

// One operand's matrices as BLAS reads them: row-major, transposed or not, leading dimension `ld`, and the element
// offset of batch entry i (the operand's strides over the output's batch shape; a broadcast dim has stride 0).
struct MatrixView {
  bool trans = false;
  int64_t ld = 1;
  std::vector<int64_t> offsets;
};

// cblas_sgemm per batch entry: C (M, N) row-major and contiguous, entries one after another.
inline void batched_sgemm(const float* a, const MatrixView& va, const float* b, const MatrixView& vb, float* c,
                          int64_t m, int64_t n, int64_t k) {
  const Wino3dBlas& blas = wino3d_blas();
  const int64_t entries = static_cast<int64_t>(va.offsets.size());
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      blas.sgemm(101, va.trans ? 112 : 111, vb.trans ? 112 : 111, static_cast<int>(m), static_cast<int>(n),
                 static_cast<int>(k), 1.0f, a + va.offsets[i], static_cast<int>(va.ld), b + vb.offsets[i],
                 static_cast<int>(vb.ld), 0.0f, c + i * m * n, static_cast<int>(n));
    }
  };
  const int threads = num_threads();
  const int64_t work = std::max<int64_t>(m * n * k, 1);
  // entries over the pool when there are enough of them to balance, or when each is too small for the BLAS's own
  // threads to pay (under ~4M multiply-adds); else the entries in turn, each GEMM threaded by the BLAS
  const bool split = threads > 1 && blas.can_serialize() && entries > 1 &&
                     (entries >= 4 * threads || work < (int64_t{1} << 22));
  if (split) {
    BlasSerialScope serial(blas, true);
    parallel_for(entries, work, body);
  } else {
    body(0, entries);
  }
}

}  // namespace porter
