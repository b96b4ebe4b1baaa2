// Winograd F(2x2, 3x3) for (kD, 3, 3) stride-1 3-d convs, depth taps summed in the GEMMs (conv3d_kernels.h): four
// passes, one primitive class. The GEMMs between them are mx.matmul / mx.addmm (layers/_native.py, winograd_conv3d);
// or the whole forward as one cache-blocked pass calling the BLAS itself (conv3d_fused_kernels.h, kind `fused`).
#include "ops_common.h"
#include "winograd_cache.h"
#include "winograd_kernels.h"
#include "conv3d_kernels.h"
#include "conv3d_fused_kernels.h"
#include "conv3d_columns_kernels.h"

namespace porter {

enum class Wino3dKind { input, output, output_adjoint, weight_adjoint, weight, fused, fused_du };

mx::array wino3d_pass(mx::Stream s, Wino3dKind kind, const Wino3dGeometry& g, std::vector<mx::array> in);

class Winograd3d : public mx::UnaryPrimitive {
 public:
  Winograd3d(mx::Stream s, Wino3dKind kind, Wino3dGeometry g) : mx::UnaryPrimitive(s), kind_(kind), g_(g) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    std::vector<mx::array> outputs{output};
    launch(stream(), inputs, outputs, [kind = kind_, g = g_](auto& in, auto& out) {
      const float* a = in[0].template data<float>();
      float* dst = out[0].template data<float>();
      switch (kind) {
        case Wino3dKind::input: wino3d_input(a, g, dst); break;
        case Wino3dKind::output:
          wino3d_output(a, in[1].template data<float>(), in[2].template data<float>(), g, in[0].shape(-1), dst);
          break;
        case Wino3dKind::output_adjoint: wino3d_output_adjoint(a, g, in[0].shape(-1), dst); break;
        case Wino3dKind::weight_adjoint:
          wino3d_weight_adjoint(a, in[1].template data<float>(), in[2].template data<float>(), g, in[0].shape(-1),
                                dst);
          break;
        case Wino3dKind::weight: wino3d_weight(a, in[0].shape(0), in[0].shape(1), in[0].shape(4), dst); break;
        case Wino3dKind::fused:
          wino3d_fused(a, in[1].template data<float>(), in[2].template data<float>(), g, in[1].shape(-1), g.block,
                       dst);
          break;
        case Wino3dKind::fused_du: wino3d_fused_du(a, in[1].template data<float>(), g, in[1].shape(-1), g.block, dst); break;
      }
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[porter.winograd3d] no GPU kernel: runs on the CPU stream only");
  }
  const char* name() const override {
    switch (kind_) {
      case Wino3dKind::input: return "PorterWinograd3dInput";
      case Wino3dKind::output: return "PorterWinograd3dOutput";
      case Wino3dKind::output_adjoint: return "PorterWinograd3dOutputAdjoint";
      case Wino3dKind::weight: return "PorterWinograd3dWeight";
      case Wino3dKind::fused: return "PorterWinograd3dFused";
      case Wino3dKind::fused_du: return "PorterWinograd3dFusedWeightGrad";
      default: return "PorterWinograd3dWeightAdjoint";
    }
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>&, const std::vector<mx::array>&, const std::vector<int>&,
                             const std::vector<mx::array>&) override {
    throw std::invalid_argument(
        "[porter.winograd3d] the passes have no VJP of their own, so the 3-d Winograd conv has no second derivative: "
        "differentiate it once, or set porter.layers._conv_engine.WINOGRAD_3D = False for higher orders");
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override {
    // every pass is linear in its first input (the others only feed the direct redo of non-finite results)
    auto s = stream();
    for (size_t i = 0; i < argnums.size(); ++i) {
      if (argnums[i] == 0) {
        std::vector<mx::array> in = primals;
        in[0] = mx::astype(tangents[i], mx::float32, s);
        return {wino3d_pass(s, kind_, g_, std::move(in))};
      }
    }
    return {mx::zeros(shape_of(primals), mx::float32, s)};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    // one pass per mapped example (the conv's own custom vmap is MLX's conv; this only runs when MLX maps the
    // custom function's inner graph as well)
    auto s = stream();
    int v = 0;
    for (size_t i = 0; i < axes.size(); ++i) {
      if (axes[i] >= 0) v = inputs[i].shape(axes[i]);
    }
    std::vector<mx::array> outs;
    for (int k = 0; k < v; ++k) {
      std::vector<mx::array> in;
      for (size_t i = 0; i < inputs.size(); ++i) {
        in.push_back(axes[i] >= 0 ? mx::take(inputs[i], k, axes[i], s) : inputs[i]);
      }
      outs.push_back(wino3d_pass(s, kind_, g_, std::move(in)));
    }
    return {{mx::stack(outs, 0, s)}, {0}};
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<Winograd3d>(*this, other)) return false;
    auto& o = static_cast<const Winograd3d&>(other);
    return kind_ == o.kind_ && g_ == o.g_;
  }
  mx::Shape shape_of(const std::vector<mx::array>& in) const { return out_shape(kind_, g_, in); }

  static mx::Shape out_shape(Wino3dKind kind, const Wino3dGeometry& g, const std::vector<mx::array>& in) {
    switch (kind) {
      case Wino3dKind::input: return {16, static_cast<int>(g.in_rows()), static_cast<int>(g.ci)};
      case Wino3dKind::output:
        return {static_cast<int>(g.n), static_cast<int>(g.dout), static_cast<int>(g.ho), static_cast<int>(g.wo),
                in[0].shape(-1)};
      case Wino3dKind::fused_du:
        return {static_cast<int>(g.kd), 16, static_cast<int>(g.ci), in[1].shape(-1)};
      case Wino3dKind::fused:
        return {static_cast<int>(g.n), static_cast<int>(g.dout), static_cast<int>(g.ho), static_cast<int>(g.wo),
                in[1].shape(-1)};
      case Wino3dKind::output_adjoint: return {16, static_cast<int>(g.out_rows()), in[0].shape(-1)};
      case Wino3dKind::weight: return {in[0].shape(1), 16, in[0].shape(4), in[0].shape(0)};
      default: return {in[0].shape(-1), static_cast<int>(g.kd), 3, 3, static_cast<int>(g.ci)};
    }
  }

 private:
  Wino3dKind kind_;
  Wino3dGeometry g_;
};

mx::array wino3d_pass(mx::Stream s, Wino3dKind kind, const Wino3dGeometry& g, std::vector<mx::array> in) {
  auto shape = Winograd3d::out_shape(kind, g, in);
  return mx::array(std::move(shape), mx::float32, std::make_shared<Winograd3d>(s, kind, g), std::move(in));
}

// The geometry of a conv of x (N, D, H, W, C_in) with kd depth taps, lo_* zero padding before, output dout x ho x wo.
Wino3dGeometry wino3d_geometry(const mx::array& x, int64_t kd, int64_t lo_d, int64_t lo_h, int64_t lo_w,
                               int64_t dout, int64_t ho, int64_t wo, const char* what) {
  if (x.ndim() != 5) fail(what, "x must be (N, D, H, W, C_in)");
  check_f32(x, what, "x");
  if (kd <= 0 || lo_d < 0 || lo_h < 0 || lo_w < 0 || dout <= 0 || ho <= 0 || wo <= 0) {
    fail(what, "kd must be positive, padding non-negative and the output non-empty");
  }
  Wino3dGeometry g;
  g.n = x.shape(0);
  g.d = x.shape(1);
  g.h = x.shape(2);
  g.w = x.shape(3);
  g.ci = x.shape(4);
  g.kd = kd;
  g.lo_d = lo_d;
  g.lo_h = lo_h;
  g.lo_w = lo_w;
  g.dout = dout;
  g.ho = ho;
  g.wo = wo;
  if (g.n <= 0 || g.ci <= 0) fail(what, "x must have a batch and channels");
  return g;
}

// x (N, D, H, W, C_in) -> V (16, F * N * T, C_in), F = dout + kd - 1 frames from depth -lo_d.
mx::array winograd3d_input_op(const mx::array& x, int64_t kd, int64_t lo_d, int64_t lo_h, int64_t lo_w, int64_t dout,
                              int64_t ho, int64_t wo) {
  auto s = cpu_stream("winograd3d_input");
  auto g = wino3d_geometry(x, kd, lo_d, lo_h, lo_w, dout, ho, wo, "winograd3d_input");
  return wino3d_pass(s, Wino3dKind::input, g, {x});
}

void check_wino3d_weight(const mx::array& w, const Wino3dGeometry& g, int64_t co, const char* what) {
  if (w.ndim() != 5 || w.shape(0) != co || w.shape(1) != g.kd || w.shape(2) != 3 || w.shape(3) != 3 ||
      w.shape(4) != g.ci) {
    fail(what, "w must be (C_out, kD, 3, 3, C_in) matching x and the GEMM result");
  }
  check_f32(w, what, "w");
}

// M (16, dout * N * T, C_out) -> y (N, dout, ho, wo, C_out); x, w: the conv's input and weight (direct redo).
mx::array winograd3d_output_op(const mx::array& m, const mx::array& x, const mx::array& w, int64_t lo_d, int64_t lo_h,
                               int64_t lo_w, int64_t dout, int64_t ho, int64_t wo) {
  auto s = cpu_stream("winograd3d_output");
  if (w.ndim() != 5) fail("winograd3d_output", "w must be (C_out, kD, 3, 3, C_in)");
  auto g = wino3d_geometry(x, w.shape(1), lo_d, lo_h, lo_w, dout, ho, wo, "winograd3d_output");
  if (m.ndim() != 3 || m.shape(0) != 16 || m.shape(1) != g.out_rows()) {
    fail("winograd3d_output", "m must be (16, dout * N * ceil(ho/2) * ceil(wo/2), C_out)");
  }
  check_f32(m, "winograd3d_output", "m");
  check_wino3d_weight(w, g, m.shape(2), "winograd3d_output");
  return wino3d_pass(s, Wino3dKind::output, g, {m, x, w});
}

// gy (N, dout, ho, wo, C_out) -> dM (16, dout * N * T, C_out): the output pass's adjoint; x gives the geometry.
mx::array winograd3d_output_adjoint_op(const mx::array& gy, const mx::array& x, int64_t kd, int64_t lo_d, int64_t lo_h,
                                       int64_t lo_w) {
  auto s = cpu_stream("winograd3d_output_adjoint");
  if (gy.ndim() != 5 || gy.shape(0) != x.shape(0)) fail("winograd3d_output_adjoint", "gy must be (N, D, H, W, C_out)");
  check_f32(gy, "winograd3d_output_adjoint", "gy");
  auto g = wino3d_geometry(x, kd, lo_d, lo_h, lo_w, gy.shape(1), gy.shape(2), gy.shape(3), "winograd3d_output_adjoint");
  return wino3d_pass(s, Wino3dKind::output_adjoint, g, {gy});
}

// dU (kD, 16, C_in, C_out) -> dw (C_out, kD, 3, 3, C_in); x (N, D, H, W, C_in) and gy (N, dout, ho, wo, C_out) for
// the direct redo when the result is not finite; padding_products: whether that redo adds gy * 0 on the padding taps
// (torch's 3-d conv: an inf there gives NaN) or nothing (torch's 2-d conv, the 2-d Winograd's weight gradient).
mx::array winograd3d_weight_adjoint_op(const mx::array& du, const mx::array& x, const mx::array& gy, int64_t lo_d,
                                       int64_t lo_h, int64_t lo_w, bool padding_products) {
  auto s = cpu_stream("winograd3d_weight_adjoint");
  if (du.ndim() != 4 || du.shape(1) != 16) fail("winograd3d_weight_adjoint", "du must be (kD, 16, C_in, C_out)");
  if (gy.ndim() != 5 || gy.shape(-1) != du.shape(3) || gy.shape(0) != x.shape(0)) {
    fail("winograd3d_weight_adjoint", "gy must be (N, D, H, W, C_out) matching du and x");
  }
  check_f32(du, "winograd3d_weight_adjoint", "du");
  check_f32(gy, "winograd3d_weight_adjoint", "gy");
  auto g = wino3d_geometry(x, du.shape(0), lo_d, lo_h, lo_w, gy.shape(1), gy.shape(2), gy.shape(3),
                           "winograd3d_weight_adjoint");
  if (du.shape(2) != g.ci) fail("winograd3d_weight_adjoint", "du's C_in does not match x");
  g.padding_products = padding_products;
  return wino3d_pass(s, Wino3dKind::weight_adjoint, g, {du, x, gy});
}

// w (C_out, kD, 3, 3, C_in) -> U (kD, 16, C_in, C_out) in one blocked pass; cached per weight array like
// winograd_weight_taps (same key, same result) unless `cache` is false or w is traced.
mx::array winograd3d_weight_op(const mx::array& w, bool cache) {
  auto s = cpu_stream("winograd3d_weight");
  if (w.ndim() != 5 || w.shape(2) != 3 || w.shape(3) != 3) fail("winograd3d_weight", "w must be (C_out, kD, 3, 3, C_in)");
  check_f32(w, "winograd3d_weight", "w");
  auto& store = WinogradCache::get();
  cache = cache && !w.is_tracer() && store.enabled();
  if (cache) {
    if (auto hit = store.lookup(w)) return *hit;
  }
  auto u = wino3d_pass(s, Wino3dKind::weight, Wino3dGeometry{}, {w});
  if (cache) store.insert(w, u);
  return u;
}

// x (N, D, H, W, C_in), u (kD, 16, C_in, C_out) = winograd3d_weight(w), w (C_out, kD, 3, 3, C_in) -> y (N, dout,
// ho, wo, C_out) in one cache-blocked pass (conv3d_fused_kernels.h), `block` rows of (example, tile) per GEMM;
// padding_products: whether the direct redo of a non-finite tile adds x * 0 on padding taps (3-d: yes, as torch; a
// 2-d conv run as one frame: no). Needs the BLAS handed over by winograd3d_set_blas.
mx::array winograd3d_fused_op(const mx::array& x, const mx::array& u, const mx::array& w, int64_t lo_d, int64_t lo_h,
                              int64_t lo_w, int64_t dout, int64_t ho, int64_t wo, int64_t block,
                              bool padding_products) {
  auto s = cpu_stream("winograd3d_fused");
  if (!wino3d_blas().sgemm) fail("winograd3d_fused", "no BLAS: call winograd3d_set_blas first");
  if (w.ndim() != 5) fail("winograd3d_fused", "w must be (C_out, kD, 3, 3, C_in)");
  if (block <= 0) fail("winograd3d_fused", "block must be positive");
  auto g = wino3d_geometry(x, w.shape(1), lo_d, lo_h, lo_w, dout, ho, wo, "winograd3d_fused");
  check_wino3d_weight(w, g, w.shape(0), "winograd3d_fused");
  if (u.ndim() != 4 || u.shape(0) != g.kd || u.shape(1) != 16 || u.shape(2) != g.ci || u.shape(3) != w.shape(0)) {
    fail("winograd3d_fused", "u must be (kD, 16, C_in, C_out) matching w");
  }
  check_f32(u, "winograd3d_fused", "u");
  g.block = block;
  g.padding_products = padding_products;
  return wino3d_pass(s, Wino3dKind::fused, g, {x, u, w});
}

// x (N, D, H, W, C_in), gy (N, dout, ho, wo, C_out) -> dU (kD, 16, C_in, C_out), the Winograd-domain weight gradient
// (winograd3d_weight_adjoint's input) in one cache-blocked pass (conv3d_fused_kernels.h).
mx::array winograd3d_fused_du_op(const mx::array& x, const mx::array& gy, int64_t kd, int64_t lo_d, int64_t lo_h,
                                 int64_t lo_w, int64_t block) {
  auto s = cpu_stream("winograd3d_fused_du");
  if (!wino3d_blas().sgemm) fail("winograd3d_fused_du", "no BLAS: call winograd3d_set_blas first");
  if (block <= 0) fail("winograd3d_fused_du", "block must be positive");
  if (gy.ndim() != 5 || gy.shape(0) != x.shape(0)) fail("winograd3d_fused_du", "gy must be (N, D, H, W, C_out)");
  check_f32(gy, "winograd3d_fused_du", "gy");
  auto g = wino3d_geometry(x, kd, lo_d, lo_h, lo_w, gy.shape(1), gy.shape(2), gy.shape(3), "winograd3d_fused_du");
  g.block = block;
  return wino3d_pass(s, Wino3dKind::fused_du, g, {x, gy});
}

// The BLAS the fused pass calls: addresses of cblas_sgemm and (0 if none) of a function that sets the calling
// thread's BLAS threads and returns the previous setting (OpenBLAS's openblas_set_num_threads_local).
void winograd3d_set_blas(uintptr_t sgemm, uintptr_t set_threads_local, uintptr_t set_threads, uintptr_t get_threads) {
  wino3d_blas().sgemm = reinterpret_cast<SgemmFn>(sgemm);
  wino3d_blas().set_threads_local = reinterpret_cast<BlasThreadsFn>(set_threads_local);
  wino3d_blas().set_threads = reinterpret_cast<BlasSetThreadsFn>(set_threads);
  wino3d_blas().get_threads = reinterpret_cast<BlasGetThreadsFn>(get_threads);
}

// A one-group 3-d conv as im2col + GEMM over blocks of output rows (conv3d_columns_kernels.h). Forward only: the
// engine's strided conv gives its VJP (layers/_conv_engine.py, _strided_conv_op).
class Conv3dColumns : public mx::UnaryPrimitive {
 public:
  Conv3dColumns(mx::Stream s, Cols3dGeometry g) : mx::UnaryPrimitive(s), g_(g) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch(stream(), inputs, output, [g = g_](auto& in, auto& out) {
      Cols3dGeometry batch = g;
      batch.n = in[0].shape(0);  // a vmap folds its axis into the batch
      cols3d_conv(in[0].template data<float>(), in[1].template data<float>(), batch, in[1].shape(0),
                  out[0].template data<float>());
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("conv3d_columns"); }
  const char* name() const override { return "PorterConv3dColumns"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<Conv3dColumns>(*this, other)) return false;
    const auto& o = static_cast<const Conv3dColumns&>(other).g_;
    return g_.kd == o.kd && g_.kh == o.kh && g_.kw == o.kw && g_.sd == o.sd && g_.sh == o.sh && g_.sw == o.sw &&
           g_.lo_d == o.lo_d && g_.lo_h == o.lo_h && g_.lo_w == o.lo_w && g_.dout == o.dout && g_.ho == o.ho &&
           g_.wo == o.wo && g_.block == o.block;
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>&, const std::vector<mx::array>&, const std::vector<int>&,
                             const std::vector<mx::array>&) override {
    throw std::invalid_argument(
        "[porter.conv3d_columns] forward only: differentiate the conv through porter.layers (its custom VJP)");
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "conv3d_columns", inputs, axes, {true, false},
                           [&](const std::vector<mx::array>& in) {
                             mx::Shape shape{in[0].shape(0), static_cast<int>(g_.dout), static_cast<int>(g_.ho),
                                             static_cast<int>(g_.wo), in[1].shape(0)};
                             auto p = std::make_shared<Conv3dColumns>(stream(), g_);
                             return std::vector<mx::array>{mx::array(std::move(shape), mx::float32, std::move(p),
                                                                     {in[0], in[1]})};
                           });
  }

 private:
  Cols3dGeometry g_;
};

// x (N, D, H, W, C_in), w (C_out, kD, kH, kW, C_in), float32 -> y (N, dout, ho, wo, C_out); stride and lo (padding
// before) per spatial dim; `block` output rows per GEMM. Needs the BLAS handed over by winograd3d_set_blas.
mx::array conv3d_columns_op(const mx::array& x, const mx::array& w, const Ints& stride, const Ints& lo, int64_t dout,
                            int64_t ho, int64_t wo, int64_t block) {
  const char* what = "conv3d_columns";
  auto s = cpu_stream(what);
  if (!wino3d_blas().sgemm) fail(what, "no BLAS: call winograd3d_set_blas first");
  if (x.ndim() != 5) fail(what, "x must be (N, D, H, W, C_in)");
  if (w.ndim() != 5 || w.shape(4) != x.shape(4)) fail(what, "w must be (C_out, kD, kH, kW, C_in) with x's C_in");
  check_f32(x, what, "x");
  check_f32(w, what, "w");
  if (stride.size() != 3 || lo.size() != 3) fail(what, "stride and lo must have 3 entries");
  if (block <= 0) fail(what, "block must be positive");
  Cols3dGeometry g;
  g.n = x.shape(0), g.d = x.shape(1), g.h = x.shape(2), g.w = x.shape(3), g.ci = x.shape(4);
  g.kd = w.shape(1), g.kh = w.shape(2), g.kw = w.shape(3);
  g.sd = stride[0], g.sh = stride[1], g.sw = stride[2];
  g.lo_d = lo[0], g.lo_h = lo[1], g.lo_w = lo[2];
  g.dout = dout, g.ho = ho, g.wo = wo, g.block = block;
  if (g.sd <= 0 || g.sh <= 0 || g.sw <= 0) fail(what, "strides must be positive");
  if (g.lo_d < 0 || g.lo_h < 0 || g.lo_w < 0) fail(what, "lo must be non-negative");
  if (dout <= 0 || ho <= 0 || wo <= 0) fail(what, "the output size must be positive");
  mx::Shape shape{x.shape(0), static_cast<int>(dout), static_cast<int>(ho), static_cast<int>(wo), w.shape(0)};
  auto p = std::make_shared<Conv3dColumns>(s, g);
  return mx::array(std::move(shape), mx::float32, std::move(p),
                   {x, w});
}

void bind_conv3d(nb::module_& m) {
  m.def("conv3d_columns", &conv3d_columns_op, nb::arg("x"), nb::arg("w"), nb::arg("stride"), nb::arg("lo"),
        nb::arg("dout"), nb::arg("ho"), nb::arg("wo"), nb::arg("block"));
  m.def("winograd3d_fused_du", &winograd3d_fused_du_op, nb::arg("x"), nb::arg("gy"), nb::arg("kd"), nb::arg("lo_d"),
        nb::arg("lo_h"), nb::arg("lo_w"), nb::arg("block"));
  m.def("winograd3d_set_blas", &winograd3d_set_blas, nb::arg("sgemm"), nb::arg("set_threads_local"),
        nb::arg("set_threads") = 0, nb::arg("get_threads") = 0);
  m.def("winograd3d_fused", &winograd3d_fused_op, nb::arg("x"), nb::arg("u"), nb::arg("w"), nb::arg("lo_d"),
        nb::arg("lo_h"), nb::arg("lo_w"), nb::arg("dout"), nb::arg("ho"), nb::arg("wo"), nb::arg("block"),
        nb::arg("padding_products") = true);
  m.def("winograd3d_weight", &winograd3d_weight_op, nb::arg("w"), nb::arg("cache") = true);
  m.def("winograd3d_input", &winograd3d_input_op, nb::arg("x"), nb::arg("kd"), nb::arg("lo_d"), nb::arg("lo_h"),
        nb::arg("lo_w"), nb::arg("dout"), nb::arg("ho"), nb::arg("wo"));
  m.def("winograd3d_output", &winograd3d_output_op, nb::arg("m"), nb::arg("x"), nb::arg("w"), nb::arg("lo_d"),
        nb::arg("lo_h"), nb::arg("lo_w"), nb::arg("dout"), nb::arg("ho"), nb::arg("wo"));
  m.def("winograd3d_output_adjoint", &winograd3d_output_adjoint_op, nb::arg("gy"), nb::arg("x"), nb::arg("kd"),
        nb::arg("lo_d"), nb::arg("lo_h"), nb::arg("lo_w"));
  m.def("winograd3d_weight_adjoint", &winograd3d_weight_adjoint_op, nb::arg("du"), nb::arg("x"), nb::arg("gy"),
        nb::arg("lo_d"), nb::arg("lo_h"), nb::arg("lo_w"), nb::arg("padding_products") = true);
}

}  // namespace porter
