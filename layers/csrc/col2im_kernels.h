// Columns <-> image for 2-d transposed convs: the scatter-add that follows the GEMM `cols = x @ w` (col2im) and
// its adjoint, the gather of image patches into columns (im2col).
//
// Layouts: columns (N, H, W, kH, kW, C) contiguous, one (kH, kW, C) block of tap contributions per input pixel;
// image (N, Ho, Wo, C) contiguous. Per spatial dim a `ColAxis` places tap a of input position i at
//   image position  stride * i + step * a + offset
// (a transposed conv with stride s, dilation d, padding p: step d, offset -p; taps stored reversed: step -d, offset
// d*(k-1) - p). Positions outside [0, size) are dropped by the scatter and read as zero by the gather. The scatter
// computes every image pixel once, as the sum of the tap blocks that land on it (no atomics, channel-contiguous
// adds; 16-bit types accumulate in float and round once); the gather copies bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "dispatch.h"
#include "parallel.h"

namespace porter {

struct ColAxis {
  int64_t stride, step, offset;
  bool operator==(const ColAxis& o) const { return stride == o.stride && step == o.step && offset == o.offset; }
};

// For every image position along one dim: the (input position, tap) pairs that land on it, as element offsets
// `input * in_pitch + tap * tap_pitch` into the columns, listed in [begin[o], begin[o + 1]).
struct ColLanding {
  std::vector<int64_t> begin, offsets;
};

inline ColLanding col_landing(const ColAxis& ax, int64_t in, int64_t taps, int64_t size, int64_t in_pitch,
                              int64_t tap_pitch) {
  ColLanding l;
  std::vector<std::vector<int64_t>> per(size);
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t a = 0; a < taps; ++a) {
      const int64_t o = ax.stride * i + ax.step * a + ax.offset;
      if (o >= 0 && o < size) per[o].push_back(i * in_pitch + a * tap_pitch);
    }
  }
  l.begin.push_back(0);
  for (auto& v : per) {
    l.offsets.insert(l.offsets.end(), v.begin(), v.end());
    l.begin.push_back(static_cast<int64_t>(l.offsets.size()));
  }
  return l;
}

// image[n, oh, ow, :] = sum of cols[n, ih, iw, a, b, :] over the (ih, a), (iw, b) landing on (oh, ow). One output
// row at a time, accumulated in place (a float row for 16-bit types): each (ih, a) landing on it streams its part of
// the columns in memory order (the (iw, b) pairs as offset pairs), so the reads are one regular stride; summing
// per output pixel instead (its 2-4 sources from two rows, interleaved) ran at 5 GB/s once the columns left the cache.
template <typename T>
void columns_to_image(const T* cols, int64_t n, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t c,
                      const ColAxis& ay, const ColAxis& ax, int64_t ho, int64_t wo, T* image) {
  using A = typename Acc<T>::type;
  const int64_t pixel = kh * kw * c, row_pitch = w * pixel;
  const ColLanding rows = col_landing(ay, h, kh, ho, row_pitch, kw * c);
  std::vector<int64_t> src, dst;  // along W: every (iw, b) that lands inside, in the columns' order
  for (int64_t iw = 0; iw < w; ++iw) {
    for (int64_t b = 0; b < kw; ++b) {
      const int64_t ow = ax.stride * iw + ax.step * b + ax.offset;
      if (ow >= 0 && ow < wo) {
        src.push_back(iw * pixel + b * c);
        dst.push_back(ow * c);
      }
    }
  }
  const int64_t per_row = std::max<int64_t>(1, static_cast<int64_t>(rows.offsets.size() / std::max<int64_t>(1, ho)));
  parallel_for(n * ho, per_row * static_cast<int64_t>(src.size()) * c + wo * c, [&](int64_t begin, int64_t end) {
    std::vector<A> buffer(std::is_same_v<A, T> ? 0 : wo * c);
    for (int64_t job = begin; job < end; ++job) {
      const int64_t b = job / ho, oh = job % ho;
      const T* base = cols + b * h * row_pitch;
      T* out_row = image + job * wo * c;
      A* acc;
      if constexpr (std::is_same_v<A, T>) acc = out_row;
      else acc = buffer.data();
      std::fill(acc, acc + wo * c, A(0));
      for (int64_t r = rows.begin[oh]; r < rows.begin[oh + 1]; ++r) {
        const T* row = base + rows.offsets[r];
        for (size_t k = 0; k < src.size(); ++k) {
          const T* from = row + src[k];
          A* to = acc + dst[k];
          for (int64_t ch = 0; ch < c; ++ch) to[ch] += static_cast<A>(from[ch]);
        }
      }
      if constexpr (!std::is_same_v<A, T>) {
        for (int64_t i = 0; i < wo * c; ++i) out_row[i] = static_cast<T>(acc[i]);
      }
    }
  });
}

// cols[n, ih, iw, a, b, :] = image[n, stride*ih + step*a + offset, ..., :], zero outside the image. T: an unsigned
// integer of the element's size (bits are copied).
template <typename T>
void image_to_columns(const T* image, int64_t n, int64_t ho, int64_t wo, int64_t c, const ColAxis& ay,
                      const ColAxis& ax, int64_t h, int64_t w, int64_t kh, int64_t kw, T* cols) {
  const int64_t block = kh * kw * c;
  parallel_for(n * h, w * block, [&](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t b = job / h, ih = job % h;
      T* dst = cols + job * w * block;
      for (int64_t a = 0; a < kh; ++a) {
        const int64_t oh = ay.stride * ih + ay.step * a + ay.offset;
        const bool row_in = oh >= 0 && oh < ho;
        const T* src_row = image + (b * ho + (row_in ? oh : 0)) * wo * c;
        for (int64_t iw = 0; iw < w; ++iw) {
          const int64_t ow0 = ax.stride * iw + ax.offset;
          if (row_in && ax.step == 1 && ow0 >= 0 && ow0 + kw <= wo) {
            // undilated taps inside the image: one run of kw*c contiguous elements in the image and the columns
            // (one copy instead of kw: a 3-channel stem's 7 taps were 7 calls of 12 bytes each)
            std::memcpy(dst + iw * block + a * kw * c, src_row + ow0 * c, kw * c * sizeof(T));
            continue;
          }
          for (int64_t bb = 0; bb < kw; ++bb) {
            const int64_t ow = ax.stride * iw + ax.step * bb + ax.offset;
            T* d = dst + iw * block + (a * kw + bb) * c;
            if (row_in && ow >= 0 && ow < wo) {
              std::memcpy(d, src_row + ow * c, c * sizeof(T));
            } else {
              std::memset(d, 0, c * sizeof(T));
            }
          }
        }
      }
    }
  });
}

}  // namespace porter
