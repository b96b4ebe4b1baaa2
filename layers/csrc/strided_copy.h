// A strided array copied row-major (what a native op reads when it is handed a transposed or sliced view, and the
// native reshape's copy): dims that are already contiguous with their neighbour merged first, then the rows of the
// last (merged) dim split over Porter's threads, each row a memcpy when its elements are adjacent or a typed gather.
// MLX's own copy of a non-contiguous array runs on its stream's one thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "mlx/array.h"
#include "parallel.h"

namespace porter {

namespace detail {

// `shape` read through each array's `strides` (one list per array, all over `shape`), with each dim merged into the
// one before it where that one's stride is this one's times its size in every array, and size-1 dims dropped: the
// same elements in the same order, fewer and longer rows (at least one dim: (1) with stride 1 for a single element).
template <typename Sizes>
void merge_dims(const Sizes& shape, const std::vector<const int64_t*>& strides, std::vector<int64_t>& sh,
                std::vector<std::vector<int64_t>>& st) {
  st.assign(strides.size(), {});
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t n = shape[d];
    if (n == 1) continue;
    bool merge = !sh.empty();
    for (size_t k = 0; merge && k < strides.size(); ++k) merge = st[k].back() == strides[k][d] * n;
    if (merge) {
      sh.back() *= n;
      for (size_t k = 0; k < strides.size(); ++k) st[k].back() = strides[k][d];
    } else {
      sh.push_back(n);
      for (size_t k = 0; k < strides.size(); ++k) st[k].push_back(strides[k][d]);
    }
  }
  if (sh.empty()) {
    sh.push_back(1);
    for (auto& s : st) s.push_back(1);
  }
}

template <typename T>
void copy_rows(const T* src, T* dst, const std::vector<int64_t>& sh, const std::vector<int64_t>& st, int64_t r0,
               int64_t r1) {
  const int nd = static_cast<int>(sh.size());
  const int64_t len = sh[nd - 1], step = st[nd - 1];
  std::vector<int64_t> idx(static_cast<size_t>(nd), 0);
  int64_t offset = 0, rest = r0;
  for (int d = nd - 2; d >= 0; --d) {  // row r0's index and offset
    idx[d] = rest % sh[d];
    rest /= sh[d];
    offset += idx[d] * st[d];
  }
  dst += r0 * len;
  for (int64_t r = r0; r < r1; ++r, dst += len) {
    const T* from = src + offset;
    if (step == 1) {
      std::memcpy(dst, from, static_cast<size_t>(len) * sizeof(T));
    } else {
      for (int64_t j = 0; j < len; ++j) dst[j] = from[j * step];
    }
    for (int d = nd - 2; d >= 0; --d) {  // next row
      offset += st[d];
      if (++idx[d] < sh[d]) break;
      offset -= st[d] * sh[d];
      idx[d] = 0;
    }
  }
}

template <typename T>
void copy_as(const char* src, char* dst, const std::vector<int64_t>& sh, const std::vector<int64_t>& st) {
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < sh.size(); ++d) rows *= sh[d];
  const int64_t len = sh.back();
  parallel_for(rows, len, [&](int64_t r0, int64_t r1) {
    copy_rows(reinterpret_cast<const T*>(src), reinterpret_cast<T*>(dst), sh, st, r0, r1);
  });
}

}  // namespace detail

// dst (row-major, shape's size) = the strided array at src (strides in elements of `item` bytes).
inline void strided_copy(const char* src, char* dst, const mx::Shape& shape, const mx::Strides& strides,
                         size_t item) {
  if (shape.empty()) {
    std::memcpy(dst, src, item);
    return;
  }
  for (auto n : shape) {
    if (n == 0) return;
  }
  std::vector<int64_t> sh;
  std::vector<std::vector<int64_t>> st;
  detail::merge_dims(shape, {strides.data()}, sh, st);
  switch (item) {
    case 1: return detail::copy_as<uint8_t>(src, dst, sh, st[0]);
    case 2: return detail::copy_as<uint16_t>(src, dst, sh, st[0]);
    case 4: return detail::copy_as<uint32_t>(src, dst, sh, st[0]);
    case 8: return detail::copy_as<uint64_t>(src, dst, sh, st[0]);
    default: {  // complex64 and wider: bytes as a row of `item`-byte chunks
      mx::Shape bytes_shape(shape);
      mx::Strides bytes_strides(strides);
      bytes_shape.push_back(static_cast<int>(item));
      for (auto& s : bytes_strides) s *= static_cast<int64_t>(item);
      bytes_strides.push_back(1);
      std::vector<int64_t> bsh;
      std::vector<std::vector<int64_t>> bst;
      detail::merge_dims(bytes_shape, {bytes_strides.data()}, bsh, bst);
      return detail::copy_as<uint8_t>(src, dst, bsh, bst[0]);
    }
  }
}

}  // namespace porter
