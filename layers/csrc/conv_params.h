// The parameters shared by the depthwise and grouped conv primitives (conv_ops.cpp, grouped_conv_ops.cpp): which of
// the three bilinear loop nests a primitive runs, its geometry, and the output gradient's channel order.
#pragma once

#include <cstdint>

#include "ops_common.h"
#include "conv_kernels.h"

namespace porter {

// Which loop nest a conv primitive runs: the forward pass or one of its two gradients (each the others' adjoint).
enum class DwKind { forward, input_grad, weight_grad };

struct DwParams {
  Ints kernel, stride, dilation, lo;
  Ints extent, out;  // the spatial extents of the input and of the output
  int64_t mult = 1;
  bool operator==(const DwParams& o) const {
    return kernel == o.kernel && stride == o.stride && dilation == o.dilation && lo == o.lo && extent == o.extent &&
           out == o.out && mult == o.mult;
  }
};

// The geometry of a depthwise conv from its (batched, channels-last) input and output shapes.
inline DwGeometry dw_geometry(const DwParams& p, const mx::Shape& in, const mx::Shape& out) {
  DwGeometry g;
  const int nd = static_cast<int>(p.kernel.size());
  g.n = in[0];
  g.c = in.back();
  g.m = p.mult;
  for (int d = 0; d < nd; ++d) {
    const int at = 3 - nd + d;
    g.L[at] = in[1 + d];
    g.O[at] = out[1 + d];
    g.k[at] = p.kernel[d];
    g.s[at] = p.stride[d];
    g.d[at] = p.dilation[d];
    g.lo[at] = p.lo[d];
  }
  return g;
}

// The output gradient in the kernels' (N, *O, m, C) channel order (a copy only when m > 1).
inline mx::array dw_grad_layout(const mx::array& gy, int64_t mult, mx::Stream s) {
  if (mult == 1) return gy;  // the kernels' dispatch makes it row-contiguous
  mx::Shape split = gy.shape();
  const int c = static_cast<int>(split.back() / mult);
  split.back() = c;
  split.push_back(static_cast<int>(mult));
  auto t = mx::swapaxes(mx::reshape(gy, split, s), -1, -2, s);
  return mx::reshape(mx::contiguous(t, false, s), gy.shape(), s);
}

}  // namespace porter
