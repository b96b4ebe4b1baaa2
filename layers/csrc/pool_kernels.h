// The loop nests of Porter's channels-last pooling kernels (see windows.h for the window tables).
//
// All of them vectorize over the contiguous channel dim and split the outer loop over the thread pool. Forward
// kernels split output rows; kernels that scatter into the input gradient split (batch, channel block) pairs, so no
// two threads ever write the same element and the accumulation order is the serial one.
#pragma once

#include <cmath>
#include <cstring>
#include <limits>

#include "parallel.h"
#include "simd.h"
#include "windows.h"

namespace porter {

template <typename T>
typename Acc<T>::type lowest_value() {
  using A = typename Acc<T>::type;
  if constexpr (is_float_v<T>) {
    return -std::numeric_limits<A>::infinity();
  } else {
    return std::numeric_limits<T>::lowest();
  }
}

// torch's scan replaces the best value when `v > best || isnan(v)` (not `!(v <= best)`: a NaN best must stay).
template <typename A>
inline bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) {
    return v != v;
  } else {
    return false;
  }
}

// Channel blocks for the scatter kernels: enough (batch, block) pairs to feed every thread.
inline int64_t channel_block(int64_t n, int64_t c) {
  int64_t want = int64_t{num_threads()} * 4;
  if (n >= want || c <= 16) return c;
  int64_t blocks = std::min<int64_t>((want + n - 1) / n, (c + 15) / 16);
  return (c + blocks - 1) / blocks;
}

// ------------------------------------------------------------------------------------------------ window max
// Window reductions of K * 16 float32 channels with the running values in vector registers (GCC/Clang vector
// types of the CPU's width, simd.h: SSE/AVX/AVX-512 or NEON), used for contiguous channels in multiples of 16:
// measured 2x faster than a whole-row accumulator in memory on a global average pool of (8, 56, 56, 256). Taps still
// go in scan order per channel, so results are those of the generic loops bit for bit. kMaxVectors blocks of 16
// channels at once: 16 with AVX-512 (16 of its 32 registers), 6 with AVX2 and 3 with SSE/NEON (12 of 16 registers:
// wider tiles spill the running values to the stack).
#if defined(__GNUC__) || defined(__clang__)
constexpr bool kHaveVectors = true;
constexpr int64_t kPoolLanes = kVectorBytes / sizeof(float);
constexpr int64_t kBlockVectors = 16 / kPoolLanes;  // registers per block of 16 channels
constexpr int64_t kMaxVectors = kVectorBytes == 64 ? 16 : 12 / kBlockVectors;
typedef float f32v __attribute__((vector_size(kVectorBytes)));
typedef int32_t i32v __attribute__((vector_size(kVectorBytes)));

struct SumOp {
  static f32v init() { return f32v{}; }
  static f32v step(f32v acc, f32v v) { return acc + v; }
};

struct MaxOp {  // torch's scan: replace when greater or NaN
  static f32v init() {
    f32v r;
    for (int i = 0; i < kPoolLanes; ++i) r[i] = -std::numeric_limits<float>::infinity();
    return r;
  }
  static f32v step(f32v acc, f32v v) {
    const i32v take = (v > acc) | (v != v);
    return (f32v)(((i32v)v & take) | ((i32v)acc & ~take));
  }
};

template <typename Op, int K>
inline void reduce_registers_k(const float* xn, const Geometry& g, const std::vector<Axis>& ax, int64_t i0,
                               int64_t i1, int64_t i2, float* out) {
  constexpr int R = K * kBlockVectors;
  f32v acc[R];
  for (int k = 0; k < R; ++k) acc[k] = Op::init();
  for (int64_t a = ax[0].first[i0]; a < ax[0].end[i0]; a += ax[0].step) {
    for (int64_t b = ax[1].first[i1]; b < ax[1].end[i1]; b += ax[1].step) {
      for (int64_t w = ax[2].first[i2]; w < ax[2].end[i2]; w += ax[2].step) {
        const float* p = xn + a * g.stride[0] + b * g.stride[1] + w * g.stride[2];
        for (int k = 0; k < R; ++k) {
          f32v v;
          std::memcpy(&v, p + kPoolLanes * k, sizeof(v));
          acc[k] = Op::step(acc[k], v);
        }
      }
    }
  }
  for (int k = 0; k < R; ++k) std::memcpy(out + kPoolLanes * k, &acc[k], sizeof(f32v));
}

// Reduces channels [0, C) of one window of xn (channel-contiguous, C a multiple of 16) into out, 16 * kMaxVectors at a time.
template <typename Op>
inline void reduce_in_registers(const float* xn, const Geometry& g, const std::vector<Axis>& ax, int64_t i0,
                                int64_t i1, int64_t i2, int64_t C, float* out) {
  for (int64_t c0 = 0; c0 < C; c0 += 16 * kMaxVectors) {
    switch (std::min<int64_t>(kMaxVectors, (C - c0) / 16)) {
#define PORTER_REDUCE_CASE(K) \
  case K: reduce_registers_k<Op, K>(xn + c0, g, ax, i0, i1, i2, out + c0); break;
      PORTER_REDUCE_CASE(1) PORTER_REDUCE_CASE(2) PORTER_REDUCE_CASE(3) PORTER_REDUCE_CASE(4)
      PORTER_REDUCE_CASE(5) PORTER_REDUCE_CASE(6) PORTER_REDUCE_CASE(7) PORTER_REDUCE_CASE(8)
      PORTER_REDUCE_CASE(9) PORTER_REDUCE_CASE(10) PORTER_REDUCE_CASE(11) PORTER_REDUCE_CASE(12)
      PORTER_REDUCE_CASE(13) PORTER_REDUCE_CASE(14) PORTER_REDUCE_CASE(15) PORTER_REDUCE_CASE(16)
#undef PORTER_REDUCE_CASE
      default: break;
    }
  }
}
#else
constexpr bool kHaveVectors = false;
constexpr int64_t kMaxVectors = 1;
struct SumOp {};
struct MaxOp {};
template <typename Op>
inline void reduce_in_registers(const float*, const Geometry&, const std::vector<Axis>&, int64_t, int64_t, int64_t,
                                int64_t, float*) {}
#endif

// Whether a float32 reduction of `taps` taps over C channels takes the register path (see above): one pass over
// the window per 256 channels, so beyond 256 channels only while a window fits in L2.
template <typename T>
inline bool use_registers(const Geometry& g, int64_t taps) {
  return std::is_same_v<T, float> && kHaveVectors && g.stride_c == 1 && g.c % 16 == 0 &&
         (g.c <= 16 * kMaxVectors || taps * g.c * int64_t(sizeof(float)) <= (int64_t{1} << 20));
}

// out[n, o, c] = max over the window's taps (torch's scan: a tap replaces the best when it is greater or NaN, so
// ties keep the first maximum and NaN the last NaN); idx (optional) = the chosen tap's flat plane index, or the
// window's first scanned coordinate when no tap beat the start value.
template <typename T, typename I>
void window_max_impl(const T* x, const Geometry& g, const std::vector<Axis>& ax, T* out, int64_t* idx) {
  using A = typename Acc<T>::type;
  const int64_t o0 = ax[0].out(), o1 = ax[1].out(), o2 = ax[2].out(), C = g.c;
  const int64_t p0 = g.plane_stride(0), p1 = g.plane_stride(1);
  int64_t taps = 1;
  for (int d = 0; d < 3; ++d) taps *= std::max<int64_t>(1, (ax[d].end[0] - ax[d].first[0] + ax[d].step - 1) / ax[d].step);
  const bool registers = idx == nullptr && use_registers<T>(g, taps);
  parallel_for(g.n * o0 * o1, o2 * C * taps, [&](int64_t begin, int64_t end) {
    std::vector<A> best(C);
    std::vector<I> where(idx ? C : 0);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / (o0 * o1), i0 = (row / o1) % o0, i1 = row % o1;
      for (int64_t i2 = 0; i2 < o2; ++i2) {
        if constexpr (std::is_same_v<T, float>) {
          if (registers) {
            reduce_in_registers<MaxOp>(x + n * g.stride_n, g, ax, i0, i1, i2, C, out + ((row * o2) + i2) * C);
            continue;
          }
        }
        std::fill(best.begin(), best.end(), lowest_value<T>());
        if (idx) {
          const I start = static_cast<I>(ax[0].first[i0] * p0 + ax[1].first[i1] * p1 + ax[2].first[i2]);
          std::fill(where.begin(), where.end(), start);
        }
        for (int64_t a = ax[0].first[i0]; a < ax[0].end[i0]; a += ax[0].step) {
          for (int64_t b = ax[1].first[i1]; b < ax[1].end[i1]; b += ax[1].step) {
            for (int64_t w = ax[2].first[i2]; w < ax[2].end[i2]; w += ax[2].step) {
              const T* xp = x + n * g.stride_n + a * g.stride[0] + b * g.stride[1] + w * g.stride[2];
              const I flat = static_cast<I>(a * p0 + b * p1 + w);
              A* bp = best.data();
              if (idx) {
                I* wp = where.data();
                if (g.stride_c == 1) {
                  for (int64_t c = 0; c < C; ++c) {
                    A v = static_cast<A>(xp[c]);
                    const bool take = (v > bp[c]) | is_nan(v);
                    bp[c] = take ? v : bp[c];
                    wp[c] = take ? flat : wp[c];
                  }
                } else {
                  for (int64_t c = 0; c < C; ++c) {
                    A v = static_cast<A>(xp[c * g.stride_c]);
                    const bool take = (v > bp[c]) | is_nan(v);
                    bp[c] = take ? v : bp[c];
                    wp[c] = take ? flat : wp[c];
                  }
                }
              } else if (g.stride_c == 1) {
                for (int64_t c = 0; c < C; ++c) {
                  A v = static_cast<A>(xp[c]);
                  bp[c] = ((v > bp[c]) | is_nan(v)) ? v : bp[c];
                }
              } else {
                for (int64_t c = 0; c < C; ++c) {
                  A v = static_cast<A>(xp[c * g.stride_c]);
                  bp[c] = ((v > bp[c]) | is_nan(v)) ? v : bp[c];
                }
              }
            }
          }
        }
        const int64_t at = ((row * o2) + i2) * C;
        for (int64_t c = 0; c < C; ++c) out[at + c] = static_cast<T>(best[c]);
        if (idx) {
          for (int64_t c = 0; c < C; ++c) idx[at + c] = static_cast<int64_t>(where[c]);
        }
      }
    }
  });
}

template <typename T>
void window_max(const T* x, const Geometry& g, const std::vector<Axis>& ax, T* out, int64_t* idx) {
  // the running index in 32 bits while the plane allows: it shares a vector lane width with float
  if (g.plane() < (int64_t{1} << 31)) {
    window_max_impl<T, int32_t>(x, g, ax, out, idx);
  } else {
    window_max_impl<T, int64_t>(x, g, ax, out, idx);
  }
}

// The gradient of window_max: every output's gradient goes to the tap window_max chose (recomputed here from x, the
// same scan), accumulated in the serial order; a window with no real tap (dilation past the input) passes nothing.
template <typename T, typename I>
void window_max_grad_impl(const T* x, const Geometry& g, const std::vector<Axis>& ax, const T* gout, T* gin) {
  using A = typename Acc<T>::type;
  const int64_t o0 = ax[0].out(), o1 = ax[1].out(), o2 = ax[2].out(), C = g.c;
  const int64_t plane = g.plane(), p0 = g.plane_stride(0), p1 = g.plane_stride(1);
  const int64_t cb = channel_block(g.n, C), blocks = (C + cb - 1) / cb;
  int64_t taps = 1;
  for (int d = 0; d < 3; ++d) taps *= std::max<int64_t>(1, (ax[d].end[0] - ax[d].first[0] + ax[d].step - 1) / ax[d].step);
  parallel_for(g.n * blocks, (o0 * o1 * o2 * (taps + 1) + plane) * cb, [&](int64_t begin, int64_t end) {
    std::vector<A> best(cb);
    std::vector<I> where(cb);
    for (int64_t job = begin; job < end; ++job) {
      const int64_t n = job / blocks, c0 = (job % blocks) * cb, w_c = std::min(C, c0 + cb) - c0;
      T* gi = gin + n * plane * C + c0;
      for (int64_t p = 0; p < plane; ++p) std::fill(gi + p * C, gi + p * C + w_c, T(0));
      for (int64_t i0 = 0; i0 < o0; ++i0) {
        for (int64_t i1 = 0; i1 < o1; ++i1) {
          for (int64_t i2 = 0; i2 < o2; ++i2) {
            if (ax[0].first[i0] >= ax[0].end[i0] || ax[1].first[i1] >= ax[1].end[i1] ||
                ax[2].first[i2] >= ax[2].end[i2]) {
              continue;
            }
            std::fill(best.begin(), best.begin() + w_c, lowest_value<T>());
            std::fill(where.begin(), where.begin() + w_c,
                      static_cast<I>(ax[0].first[i0] * p0 + ax[1].first[i1] * p1 + ax[2].first[i2]));
            for (int64_t a = ax[0].first[i0]; a < ax[0].end[i0]; a += ax[0].step) {
              for (int64_t b = ax[1].first[i1]; b < ax[1].end[i1]; b += ax[1].step) {
                for (int64_t w = ax[2].first[i2]; w < ax[2].end[i2]; w += ax[2].step) {
                  const T* xp = x + n * g.stride_n + a * g.stride[0] + b * g.stride[1] + w * g.stride[2] +
                                c0 * g.stride_c;
                  const I flat = static_cast<I>(a * p0 + b * p1 + w);
                  A* bp = best.data();
                  I* wp = where.data();
                  for (int64_t c = 0; c < w_c; ++c) {
                    A v = static_cast<A>(xp[c * g.stride_c]);
                    const bool take = (v > bp[c]) | is_nan(v);
                    bp[c] = take ? v : bp[c];
                    wp[c] = take ? flat : wp[c];
                  }
                }
              }
            }
            const T* gp = gout + (((n * o0 + i0) * o1 + i1) * o2 + i2) * C + c0;
            for (int64_t c = 0; c < w_c; ++c) {
              T& dst = gi[static_cast<int64_t>(where[c]) * C + c];
              dst = static_cast<T>(dst + gp[c]);
            }
          }
        }
      }
    }
  });
}

template <typename T>
void window_max_grad(const T* x, const Geometry& g, const std::vector<Axis>& ax, const T* gout, T* gin) {
  if (g.plane() < (int64_t{1} << 31)) {
    window_max_grad_impl<T, int32_t>(x, g, ax, gout, gin);
  } else {
    window_max_grad_impl<T, int64_t>(x, g, ax, gout, gin);
  }
}

// ------------------------------------------------------------------------------------------------ fractional max
// Torch's fractional-pool window starts on one dim for one sample `u` (generate_intervals), every step rounded in
// the input's type T as torch's scalar_t arithmetic does; then clamped into [0, L - K] (torch reads out of bounds
// for samples outside [0, 1); Porter keeps the window inside the input instead).
// torch's (int) cast of a window position, defined for every value: NaN and values outside int's range give INT_MIN,
// what x86's conversion instruction and MLX's CPU astype give (the pure-MLX path), instead of undefined behaviour.
// The starts are clamped into the input afterwards.
template <typename F>
inline int64_t to_int(F v) {
  if (v >= F(-2147483648.0) && v < F(2147483648.0)) return static_cast<int>(v);
  return std::numeric_limits<int32_t>::min();
}

template <typename T>
void fractional_starts(T u_t, int64_t length, int64_t out, int64_t kernel, int64_t* starts) {
  using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
  auto round = [](F v) { return static_cast<F>(static_cast<T>(v)); };  // through T: a no-op for float/double
  const F u = static_cast<F>(u_t);
  if (out > 1) {
    const F alpha = round(round(static_cast<F>(length - kernel)) / round(static_cast<F>(out - 1)));
    const int64_t base = to_int(round(u * alpha));
    for (int64_t i = 0; i < out - 1; ++i) {
      starts[i] = to_int(round(round(round(static_cast<F>(i)) + u) * alpha)) - base;
    }
  }
  if (out > 0) starts[out - 1] = length - kernel;
  for (int64_t i = 0; i < out; ++i) starts[i] = std::min(std::max<int64_t>(starts[i], 0), length - kernel);
}

// Strided copies that the auto-vectorizer would turn into AVX-512 gathers/scatters (several times slower than scalar
// moves on the AMD cores measured here): kept scalar.
#if defined(__clang__)
#define PORTER_SCALAR_LOOP _Pragma("clang loop vectorize(disable)")
#define PORTER_SCALAR_FN
#elif defined(__GNUC__)
#define PORTER_SCALAR_LOOP
#define PORTER_SCALAR_FN __attribute__((optimize("no-tree-vectorize")))
#else
#define PORTER_SCALAR_LOOP
#define PORTER_SCALAR_FN
#endif

// dst[i] = src[i * stride] for i < n
template <typename D, typename S>
PORTER_SCALAR_FN inline void strided_load(D* __restrict dst, const S* __restrict src, int64_t stride, int64_t n) {
  PORTER_SCALAR_LOOP
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(src[i * stride]);
}

// dst[i * stride] = src[i] for i < n
template <typename D, typename S>
PORTER_SCALAR_FN inline void strided_store(D* __restrict dst, const S* __restrict src, int64_t stride, int64_t n) {
  PORTER_SCALAR_LOOP
  for (int64_t i = 0; i < n; ++i) dst[i * stride] = static_cast<D>(src[i]);
}

// One step of torch's scan over `count` candidate rows of `width` lanes: rows `src + j * step` (values) and
// `idx + j * step` (their flat indices) for j < count, reduced lane by lane into `best`/`where` (first max, last
// NaN), vectorized over the lanes.
template <typename A>
inline void scan_rows(const A* src, const int32_t* idx, int64_t step, int64_t count, int64_t width,
                      A* __restrict best, int32_t* __restrict where) {
  for (int64_t i = 0; i < width; ++i) {
    best[i] = src[i];
    where[i] = idx[i];
  }
  for (int64_t j = 1; j < count; ++j) {
    const A* s = src + j * step;
    const int32_t* k = idx + j * step;
    for (int64_t i = 0; i < width; ++i) {
      const A v = s[i];
      const bool take = (v > best[i]) | is_nan(v);
      best[i] = take ? v : best[i];
      where[i] = take ? k[i] : where[i];
    }
  }
}

// Fractional max pool: per (n, c) plane, windows of kernel[d] consecutive taps from the starts its sample gives
// (samples (N, C, nd) in T; `column[d]`: the sample column of spatial dim d). Same scan rule as window_max.
// Separable, innermost dim first (exact for torch's rule, see layers/_window_max.py): a stride-1 sliding max
// along W (vectorized over W) picked at the window starts, then per output row the rows of the window (vectorized
// over the output row), then likewise along D. Work splits over (n, 16-channel block); the block is copied
// plane-major first and the results are written back channels-last at the end.
template <typename T>
void fractional_max(const T* x, const Geometry& g, const T* samples, const int64_t column[3], int nd,
                    const int64_t out_size[3], const int64_t kernel[3], T* out, int64_t* idx) {
  using A = typename Acc<T>::type;
  const int64_t o0 = out_size[0], o1 = out_size[1], o2 = out_size[2], C = g.c;
  const int64_t s0 = g.size[0], s1 = g.size[1], s2 = g.size[2], plane = g.plane();
  const int64_t k0 = kernel[0], k1 = kernel[1], k2 = kernel[2];
  const int64_t cb = std::min<int64_t>(C, 16), blocks = (C + cb - 1) / cb;
  const int64_t outputs = o0 * o1 * o2;
  parallel_for(g.n * blocks, (plane * (k2 + 2) + s0 * o1 * o2 * k1 + outputs * k0) * cb,
               [&](int64_t begin, int64_t end) {
    const int64_t pitch = plane + 16;  // planes padded apart: the 16 writes per pixel do not alias 4 KiB apart
    std::vector<A> local(pitch * cb);
    std::vector<A> slide(s2), r1(s0 * s1 * o2), r2(s0 * o1 * o2), res(outputs * cb);
    std::vector<int32_t> slide_i(s2), r1_i(s0 * s1 * o2), r2_i(s0 * o1 * o2), res_i(outputs * cb);
    std::vector<int64_t> st0(o0), st1(o1), st2(o2);
    int64_t* starts[3] = {st0.data(), st1.data(), st2.data()};
    for (int64_t job = begin; job < end; ++job) {
      const int64_t n = job / blocks, c0 = (job % blocks) * cb, w_c = std::min(C, c0 + cb) - c0;
      // transposed in 16 x 16 tiles (pixels x channels), which stay in L1 between the channel passes
      for (int64_t a = 0; a < s0; ++a) {
        for (int64_t b = 0; b < s1; ++b) {
          const T* rp = x + n * g.stride_n + a * g.stride[0] + b * g.stride[1] + c0 * g.stride_c;
          const int64_t pbase = (a * s1 + b) * s2;
          for (int64_t w0 = 0; w0 < s2; w0 += 16) {
            const int64_t wn = std::min<int64_t>(16, s2 - w0);
            for (int64_t c = 0; c < w_c; ++c) {
              const T* src = rp + w0 * g.stride[2] + c * g.stride_c;
              A* dst = local.data() + c * pitch + pbase + w0;
              strided_load(dst, src, g.stride[2], wn);
            }
          }
        }
      }
      for (int64_t c = 0; c < w_c; ++c) {
        const T* sp = samples + (n * C + c0 + c) * nd;
        for (int d = 0; d < 3; ++d) {
          if (d < 3 - nd) {
            std::fill(starts[d], starts[d] + out_size[d], 0);
          } else {
            fractional_starts<T>(sp[column[d]], g.size[d], out_size[d], kernel[d], starts[d]);
          }
        }
        const A* lp = local.data() + c * pitch;
        // W: sliding max of k2 taps at every position, then the window starts
        const int64_t span = s2 - k2 + 1;
        for (int64_t r = 0; r < s0 * s1; ++r) {
          const A* row = lp + r * s2;
          for (int64_t w = 0; w < span; ++w) {
            slide[w] = row[w];
            slide_i[w] = static_cast<int32_t>(w);
          }
          for (int64_t kw = 1; kw < k2; ++kw) {
            for (int64_t w = 0; w < span; ++w) {
              const A v = row[w + kw];
              const bool take = (v > slide[w]) | is_nan(v);
              slide[w] = take ? v : slide[w];
              slide_i[w] = take ? static_cast<int32_t>(w + kw) : slide_i[w];
            }
          }
          for (int64_t i2 = 0; i2 < o2; ++i2) {
            r1[r * o2 + i2] = slide[st2[i2]];
            r1_i[r * o2 + i2] = static_cast<int32_t>(r * s2 + slide_i[st2[i2]]);
          }
        }
        // H: per output row, the k1 rows of its window (vectorized over the o2 outputs)
        for (int64_t a = 0; a < s0; ++a) {
          for (int64_t i1 = 0; i1 < o1; ++i1) {
            const int64_t from = (a * s1 + st1[i1]) * o2;
            scan_rows<A>(r1.data() + from, r1_i.data() + from, o2, k1, o2, r2.data() + (a * o1 + i1) * o2,
                         r2_i.data() + (a * o1 + i1) * o2);
          }
        }
        // D: per output slice, the k0 slices of its window (vectorized over o1 * o2)
        for (int64_t i0 = 0; i0 < o0; ++i0) {
          const int64_t from = st0[i0] * o1 * o2;
          scan_rows<A>(r2.data() + from, r2_i.data() + from, o1 * o2, k0, o1 * o2,
                       res.data() + c * outputs + i0 * o1 * o2, res_i.data() + c * outputs + i0 * o1 * o2);
        }
      }
      for (int64_t o0_ = 0; o0_ < outputs; o0_ += 16) {  // back to channels-last, in 16 x 16 tiles
        const int64_t on = std::min<int64_t>(16, outputs - o0_);
        for (int64_t c = 0; c < w_c; ++c) {
          T* op = out + (n * outputs + o0_) * C + c0 + c;
          int64_t* ip = idx + (n * outputs + o0_) * C + c0 + c;
          const A* rv = res.data() + c * outputs + o0_;
          const int32_t* ri = res_i.data() + c * outputs + o0_;
          strided_store(op, rv, C, on);
          strided_store(ip, ri, C, on);
        }
      }
    }
  });
}

// ------------------------------------------------------------------------------------------------ window sum
// Average pools: out = (sum over the window's real taps) / divisor, summed in scan order in the accumulation type.
// The divisor is `override` when nonzero, else the product of the per-dim divisors (torch's avg_pool: one division)
// or, with `sequential`, a division by each dim's divisor in turn (torch's adaptive_avg_pool: `sum / kh / kw`).
// LP pooling sums x ** p over each window: torch's pow shortcuts for the common exponents (exact products, and what
// its CPU kernel computes), std::pow otherwise; in the accumulation type (float32 or float64 inputs only).
enum class PowerKind { one, two, three, half, minus_half, minus_one, minus_two, general };

inline PowerKind power_kind(double p) {
  if (p == 1.0) return PowerKind::one;
  if (p == 2.0) return PowerKind::two;
  if (p == 3.0) return PowerKind::three;
  if (p == 0.5) return PowerKind::half;
  if (p == -0.5) return PowerKind::minus_half;
  if (p == -1.0) return PowerKind::minus_one;
  if (p == -2.0) return PowerKind::minus_two;
  return PowerKind::general;
}

template <typename T, typename A>
inline void add_powers(const T* xp, int64_t sc, int64_t C, PowerKind kind, A p, A* __restrict sum) {
  switch (kind) {
    case PowerKind::two:
      for (int64_t c = 0; c < C; ++c) { const A v = static_cast<A>(xp[c * sc]); sum[c] += v * v; }
      break;
    case PowerKind::three:
      for (int64_t c = 0; c < C; ++c) { const A v = static_cast<A>(xp[c * sc]); sum[c] += v * v * v; }
      break;
    case PowerKind::half:
      for (int64_t c = 0; c < C; ++c) sum[c] += std::sqrt(static_cast<A>(xp[c * sc]));
      break;
    case PowerKind::minus_half:
      for (int64_t c = 0; c < C; ++c) sum[c] += A(1) / std::sqrt(static_cast<A>(xp[c * sc]));
      break;
    case PowerKind::minus_one:
      for (int64_t c = 0; c < C; ++c) sum[c] += A(1) / static_cast<A>(xp[c * sc]);
      break;
    case PowerKind::minus_two:
      for (int64_t c = 0; c < C; ++c) { const A v = static_cast<A>(xp[c * sc]); sum[c] += A(1) / (v * v); }
      break;
    default:
      for (int64_t c = 0; c < C; ++c) sum[c] += std::pow(static_cast<A>(xp[c * sc]), p);
      break;
  }
}

template <typename T>
void window_sum(const T* x, const Geometry& g, const std::vector<Axis>& ax, int64_t override_div, bool sequential,
                T* out, double power = 1.0) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t o0 = ax[0].out(), o1 = ax[1].out(), o2 = ax[2].out(), C = g.c;
  int64_t taps = 1;
  for (int d = 0; d < 3; ++d) taps *= std::max<int64_t>(1, ax[d].end[0] - ax[d].first[0]);
  const bool registers = power == 1.0 && use_registers<T>(g, taps);
  const PowerKind kind = power_kind(power);
  const A exponent = static_cast<A>(power);
  parallel_for(g.n * o0 * o1, o2 * C * taps, [&](int64_t begin, int64_t end) {
    std::vector<A> sum(C);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / (o0 * o1), i0 = (row / o1) % o0, i1 = row % o1;
      for (int64_t i2 = 0; i2 < o2; ++i2) {
        A* sp = sum.data();
        if constexpr (std::is_same_v<T, float>) {
          if (registers) reduce_in_registers<SumOp>(x + n * g.stride_n, g, ax, i0, i1, i2, C, sp);
        }
        if (!registers) std::fill(sum.begin(), sum.end(), A(0));
        for (int64_t a = ax[0].first[i0]; !registers && a < ax[0].end[i0]; a += ax[0].step) {
          for (int64_t b = ax[1].first[i1]; b < ax[1].end[i1]; b += ax[1].step) {
            for (int64_t w = ax[2].first[i2]; w < ax[2].end[i2]; w += ax[2].step) {
              const T* xp = x + n * g.stride_n + a * g.stride[0] + b * g.stride[1] + w * g.stride[2];
              if (kind != PowerKind::one) {
                add_powers<T, A>(xp, g.stride_c, C, kind, exponent, sp);
              } else if (g.stride_c == 1) {
                for (int64_t c = 0; c < C; ++c) sp[c] += static_cast<A>(xp[c]);
              } else {
                for (int64_t c = 0; c < C; ++c) sp[c] += static_cast<A>(xp[c * g.stride_c]);
              }
            }
          }
        }
        const int64_t at = ((row * o2) + i2) * C;
        if (override_div != 0 || !sequential) {
          const int64_t div =
              override_div != 0 ? override_div : ax[0].divisor[i0] * ax[1].divisor[i1] * ax[2].divisor[i2];
          const A d = static_cast<A>(div);
          for (int64_t c = 0; c < C; ++c) out[at + c] = static_cast<T>(sp[c] / d);
        } else {
          const A d0 = static_cast<A>(ax[0].divisor[i0]), d1 = static_cast<A>(ax[1].divisor[i1]),
                  d2 = static_cast<A>(ax[2].divisor[i2]);
          for (int64_t c = 0; c < C; ++c) out[at + c] = static_cast<T>(sp[c] / d0 / d1 / d2);
        }
      }
    }
  });
}

// The adjoint of window_sum: grad_in[tap] += grad_out / divisor, with the same divisor rule.
template <typename T>
void window_sum_grad(const T* gout, const Geometry& gi, const std::vector<Axis>& ax, int64_t override_div,
                     bool sequential, T* gin) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t o0 = ax[0].out(), o1 = ax[1].out(), o2 = ax[2].out(), C = gi.c;
  const int64_t plane = gi.plane(), p0 = gi.plane_stride(0), p1 = gi.plane_stride(1);
  const int64_t cb = channel_block(gi.n, C), blocks = (C + cb - 1) / cb;
  parallel_for(gi.n * blocks, plane * cb * 4, [&](int64_t begin, int64_t end) {
    std::vector<A> acc;
    for (int64_t job = begin; job < end; ++job) {
      const int64_t n = job / blocks, c0 = (job % blocks) * cb, c1 = std::min(C, c0 + cb), w_c = c1 - c0;
      acc.assign(plane * w_c, A(0));
      std::vector<A> share(w_c);
      for (int64_t i0 = 0; i0 < o0; ++i0) {
        for (int64_t i1 = 0; i1 < o1; ++i1) {
          for (int64_t i2 = 0; i2 < o2; ++i2) {
            const T* gp = gout + (((n * o0 + i0) * o1 + i1) * o2 + i2) * C + c0;
            if (override_div != 0 || !sequential) {
              const int64_t div =
                  override_div != 0 ? override_div : ax[0].divisor[i0] * ax[1].divisor[i1] * ax[2].divisor[i2];
              for (int64_t c = 0; c < w_c; ++c) share[c] = static_cast<A>(static_cast<T>(static_cast<A>(gp[c]) / static_cast<A>(div)));
            } else {
              const A d0 = static_cast<A>(ax[0].divisor[i0]), d1 = static_cast<A>(ax[1].divisor[i1]),
                      d2 = static_cast<A>(ax[2].divisor[i2]);
              for (int64_t c = 0; c < w_c; ++c) share[c] = static_cast<A>(static_cast<T>(static_cast<A>(gp[c]) / d0 / d1 / d2));
            }
            for (int64_t a = ax[0].first[i0]; a < ax[0].end[i0]; a += ax[0].step) {
              for (int64_t b = ax[1].first[i1]; b < ax[1].end[i1]; b += ax[1].step) {
                for (int64_t w = ax[2].first[i2]; w < ax[2].end[i2]; w += ax[2].step) {
                  A* ap = acc.data() + (a * p0 + b * p1 + w) * w_c;
                  for (int64_t c = 0; c < w_c; ++c) ap[c] += share[c];
                }
              }
            }
          }
        }
      }
      T* out = gin + n * plane * C + c0;
      for (int64_t p = 0; p < plane; ++p) {
        for (int64_t c = 0; c < w_c; ++c) out[p * C + c] = static_cast<T>(acc[p * w_c + c]);
      }
    }
  });
}

// ------------------------------------------------------------------------------------------------ plane scatter/gather
// dst (N, plane, C) = 0, then for every source position in order: dst[n, index, c] += src (add) or = src (assign).
// Indices outside [0, plane) are skipped (callers check them when they must raise).
// Returns how many indices were out of range.
template <typename T>
int64_t plane_scatter(const T* src, const int64_t* index, int64_t n_batch, int64_t positions, int64_t C,
                      int64_t plane, bool assign, T* dst) {
  const int64_t cb = channel_block(n_batch, C), blocks = (C + cb - 1) / cb;
  std::atomic<int64_t> bad{0};
  parallel_for(n_batch * blocks, (positions + plane) * cb, [&](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t n = job / blocks, c0 = (job % blocks) * cb, c1 = std::min(C, c0 + cb);
      T* out = dst + n * plane * C;
      for (int64_t p = 0; p < plane; ++p) std::fill(out + p * C + c0, out + p * C + c1, T(0));
      const T* s = src + n * positions * C;
      const int64_t* ix = index + n * positions * C;
      int64_t skipped = 0;
      for (int64_t p = 0; p < positions; ++p) {
        for (int64_t c = c0; c < c1; ++c) {
          const int64_t k = ix[p * C + c];
          if (k < 0 || k >= plane) {
            ++skipped;
            continue;
          }
          if (assign) {
            out[k * C + c] = s[p * C + c];
          } else {
            out[k * C + c] = static_cast<T>(out[k * C + c] + s[p * C + c]);
          }
        }
      }
      if (skipped) bad += skipped;
    }
  });
  return bad.load();
}

// dst[n, p, c] = src[n, index[n, p, c], c] (0 where the index is outside [0, plane)).
template <typename T>
void plane_gather(const T* src, const int64_t* index, int64_t n_batch, int64_t positions, int64_t C, int64_t plane,
                  T* dst) {
  parallel_for(n_batch * positions, C, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / positions;
      const T* s = src + n * plane * C;
      for (int64_t c = 0; c < C; ++c) {
        const int64_t k = index[row * C + c];
        dst[row * C + c] = (k < 0 || k >= plane) ? T(0) : s[k * C + c];
      }
    }
  });
}

}  // namespace porter
