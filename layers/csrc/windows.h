// Window tables and shared helpers for Porter's channels-last pooling kernels.
//
// Every kernel sees a batched channels-last array `(N, *spatial, C)` with 1 to 3 spatial dims, padded on the left to
// three (size-1 dims), so one loop nest serves 1d, 2d and 3d. Along each spatial dim, output `o` reads the taps
// `first[o], first[o] + step, ... < end[o]` (padding is never read: the tables list only real positions), in torch's
// scan order. `first[o]` is torch's first scanned coordinate even for a window with no real tap (then `first >= end`),
// because torch's index for such a window points there.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "mlx/array.h"
#include "mlx/dtype.h"
#include "mlx/types/half_types.h"

#include "dispatch.h"

namespace porter {

namespace mx = mlx::core;

struct Axis {
  std::vector<int64_t> first, end;  // per output position
  int64_t step = 1;
  std::vector<int64_t> divisor;  // average pools: per output position (empty for max pools)

  int64_t out() const { return static_cast<int64_t>(first.size()); }
  bool operator==(const Axis& o) const {
    return first == o.first && end == o.end && step == o.step && divisor == o.divisor;
  }
  static Axis unit() {
    Axis a;
    a.first = {0};
    a.end = {1};
    a.divisor = {1};
    return a;
  }
};

// The three (left-padded) spatial extents and element strides of a batched channels-last array.
struct Geometry {
  int64_t n = 1, c = 1;
  int64_t size[3] = {1, 1, 1};
  int64_t stride_n = 0, stride_c = 1;
  int64_t stride[3] = {0, 0, 0};

  static Geometry of(const mx::array& a) {
    Geometry g;
    int nd = static_cast<int>(a.ndim()) - 2;
    g.n = a.shape(0);
    g.c = a.shape(-1);
    g.stride_n = a.strides()[0];
    g.stride_c = a.strides()[a.ndim() - 1];
    for (int d = 0; d < nd; ++d) {
      g.size[3 - nd + d] = a.shape(1 + d);
      g.stride[3 - nd + d] = a.strides()[1 + d];
    }
    return g;
  }
  // Row-major strides of the (padded) plane: torch's flat per-plane index is sum(coord * plane_stride).
  int64_t plane_stride(int d) const {
    int64_t s = 1;
    for (int k = d + 1; k < 3; ++k) s *= size[k];
    return s;
  }
  int64_t plane() const { return size[0] * size[1] * size[2]; }
};

// Pads per-dim axes (given for the nd spatial dims) on the left to three.
inline std::vector<Axis> pad_axes(std::vector<Axis> axes) {
  while (axes.size() < 3) axes.insert(axes.begin(), Axis::unit());
  return axes;
}

}  // namespace porter
