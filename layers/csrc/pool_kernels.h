// The loop nests of Porter's channels-last pooling kernels (see windows.h for the window tables).
//
// All of them vectorize over the contiguous channel dim and split the outer loop over the thread pool. Forward
// kernels split output rows; kernels that scatter into the input gradient split (batch, channel block) pairs, so no
// two threads ever write the same element and the accumulation order is the serial one.
#pragma once

#include <cmath>
#include <limits>

#include "parallel.h"
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
  parallel_for(g.n * o0 * o1, o2 * C * taps, [&](int64_t begin, int64_t end) {
    std::vector<A> best(C);
    std::vector<I> where(idx ? C : 0);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / (o0 * o1), i0 = (row / o1) % o0, i1 = row % o1;
      for (int64_t i2 = 0; i2 < o2; ++i2) {
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
// Fractional windows: per (n, c) window starts `starts[d][(n * C + c) * O_d + o]` on the nd last dims, `kernel[d]`
// consecutive taps each (always in range). Same scan rule as window_max.
template <typename T>
void fractional_max(const T* x, const Geometry& g, const int64_t* const starts[3], const int64_t out_size[3],
                    const int64_t kernel[3], T* out, int64_t* idx) {
  using A = typename Acc<T>::type;
  const int64_t o0 = out_size[0], o1 = out_size[1], o2 = out_size[2], C = g.c;
  const int64_t p0 = g.plane_stride(0), p1 = g.plane_stride(1);
  parallel_for(g.n * o0 * o1, o2 * C * kernel[0] * kernel[1] * kernel[2], [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / (o0 * o1), i0 = (row / o1) % o0, i1 = row % o1;
      for (int64_t i2 = 0; i2 < o2; ++i2) {
        const int64_t at = ((row * o2) + i2) * C;
        for (int64_t c = 0; c < C; ++c) {
          const int64_t plane_id = n * C + c;
          const int64_t s0 = starts[0] ? starts[0][plane_id * o0 + i0] : 0;
          const int64_t s1 = starts[1] ? starts[1][plane_id * o1 + i1] : 0;
          const int64_t s2 = starts[2][plane_id * o2 + i2];
          A best = lowest_value<T>();
          int64_t where = s0 * p0 + s1 * p1 + s2;
          const T* xc = x + n * g.stride_n + c * g.stride_c;
          for (int64_t a = s0; a < s0 + kernel[0]; ++a) {
            for (int64_t b = s1; b < s1 + kernel[1]; ++b) {
              for (int64_t w = s2; w < s2 + kernel[2]; ++w) {
                A v = static_cast<A>(xc[a * g.stride[0] + b * g.stride[1] + w * g.stride[2]]);
                if ((v > best) | is_nan(v)) {
                  best = v;
                  where = a * p0 + b * p1 + w;
                }
              }
            }
          }
          out[at + c] = static_cast<T>(best);
          if (idx) idx[at + c] = where;
        }
      }
    }
  });
}

// ------------------------------------------------------------------------------------------------ window sum
// Average pools: out = (sum over the window's real taps) / divisor, summed in scan order in the accumulation type.
// The divisor is `override` when nonzero, else the product of the per-dim divisors (torch's avg_pool: one division)
// or, with `sequential`, a division by each dim's divisor in turn (torch's adaptive_avg_pool: `sum / kh / kw`).
template <typename T>
void window_sum(const T* x, const Geometry& g, const std::vector<Axis>& ax, int64_t override_div, bool sequential,
                T* out) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t o0 = ax[0].out(), o1 = ax[1].out(), o2 = ax[2].out(), C = g.c;
  int64_t taps = 1;
  for (int d = 0; d < 3; ++d) taps *= std::max<int64_t>(1, ax[d].end[0] - ax[d].first[0]);
  parallel_for(g.n * o0 * o1, o2 * C * taps, [&](int64_t begin, int64_t end) {
    std::vector<A> sum(C);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / (o0 * o1), i0 = (row / o1) % o0, i1 = row % o1;
      for (int64_t i2 = 0; i2 < o2; ++i2) {
        std::fill(sum.begin(), sum.end(), A(0));
        A* sp = sum.data();
        for (int64_t a = ax[0].first[i0]; a < ax[0].end[i0]; a += ax[0].step) {
          for (int64_t b = ax[1].first[i1]; b < ax[1].end[i1]; b += ax[1].step) {
            for (int64_t w = ax[2].first[i2]; w < ax[2].end[i2]; w += ax[2].step) {
              const T* xp = x + n * g.stride_n + a * g.stride[0] + b * g.stride[1] + w * g.stride[2];
              if (g.stride_c == 1) {
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
