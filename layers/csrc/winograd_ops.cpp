// Winograd F(2x2, 3x3) transforms (winograd_kernels.h): one primitive for the weight, input and output passes, the
// cache of transformed weights, and their checked ops (the GEMMs between the passes are mx.matmul: layers/_native.py).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "ops_common.h"
#include "winograd_cache.h"
#include "winograd_kernels.h"

namespace porter {

// ------------------------------------------------------------------------------------------------ winograd
// The three passes of a Winograd F(2x2, 3x3) conv (winograd_kernels.h); the GEMMs between them are mx.matmul.
// Forward only: the layer (layers/conv.py) wraps them in an mx.custom_function whose VJP is MLX's conv's.
enum class WinoKind { weight, input, output };

mx::Shape prepend(int v, mx::Shape shape) {
  shape.insert(shape.begin(), v);
  return shape;
}

// One pass as an array, its shape derived from the kind, the geometry and its first input: weight (C_out, 3, 3, C_in)
// -> (16, C_in, C_out); input x -> (16, T, C_in); output m (16, T, C_out), x, w -> (N, Ho, Wo, C_out).
mx::array wino_pass(mx::Stream s, WinoKind kind, const WinoGeometry& g, std::vector<mx::array> in);

class Winograd : public mx::UnaryPrimitive {
 public:
  Winograd(mx::Stream s, WinoKind kind, WinoGeometry g) : mx::UnaryPrimitive(s), kind_(kind), g_(g) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch(stream(), inputs, output, [kind = kind_, g = g_](auto& in, auto& out) {
      const float* src = in[0].template data<float>();
      float* dst = out[0].template data<float>();
      switch (kind) {
        case WinoKind::weight: winograd_weight(src, in[0].shape(0), in[0].shape(-1), dst); break;
        case WinoKind::input: winograd_input(src, g, dst); break;
        case WinoKind::output:
          winograd_output(src, in[1].template data<float>(), in[2].template data<float>(), g, in[0].shape(-1), dst);
          break;
      }
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("winograd"); }
  const char* name() const override {
    switch (kind_) {
      case WinoKind::weight: return "PorterWinogradWeight";
      case WinoKind::input: return "PorterWinogradInput";
      default: return "PorterWinogradOutput";
    }
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>&, const std::vector<mx::array>&, const std::vector<int>&,
                             const std::vector<mx::array>&) override {
    throw std::invalid_argument(
        "[porter.winograd] the transforms have no VJP of their own: differentiate the conv layer, whose custom "
        "VJP is MLX's conv");
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>&) override {
    // each pass is linear: its tangent is the same pass of the tangent (MLX pushes tangents through the inner
    // graph of the layer's custom function as well)
    auto s = stream();
    std::vector<mx::array> in{mx::astype(tangents[0], mx::float32, s)};
    if (kind_ == WinoKind::output) in.insert(in.end(), {primals[1], primals[2]});
    return {wino_pass(s, kind_, g_, std::move(in))};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    // MLX maps a custom function's inner graph too (the layer's custom vmap is MLX's conv), so each pass maps:
    // the vmap axis joins the batch (input, output) or the output channels (weight).
    auto s = stream();
    int v = 0;
    for (size_t i = 0; i < axes.size(); ++i) {
      if (axes[i] >= 0) v = inputs[i].shape(axes[i]);
    }
    auto a = axes[0] >= 0 ? mx::moveaxis(inputs[0], axes[0], 0, s)
                          : mx::broadcast_to(mx::expand_dims(inputs[0], 0, s), prepend(v, inputs[0].shape()), s);
    WinoGeometry g = g_;
    g.n *= v;
    switch (kind_) {
      case WinoKind::weight: {  // (V, C_out, 3, 3, C_in) -> (16, C_in, V, C_out)
        const int co = a.shape(1), ci = a.shape(4);
        auto u = wino_pass(s, kind_, g_, {mx::reshape(a, {v * co, 3, 3, ci}, s)});
        return {{mx::reshape(u, {16, ci, v, co}, s)}, {2}};
      }
      case WinoKind::input: {  // (V, N, H, W, C) -> (16, V, T, C)
        const int c = a.shape(4);
        auto out = wino_pass(s, kind_, g, {mx::reshape(a, {v * a.shape(1), a.shape(2), a.shape(3), c}, s)});
        return {{mx::reshape(out, {16, v, static_cast<int>(g_.tiles()), c}, s)}, {1}};
      }
      default: {  // (V, 16, T, C_out), x (V, N, H, W, C_in) -> (V, N, Ho, Wo, C_out)
        auto x = axes[1] >= 0 ? mx::moveaxis(inputs[1], axes[1], 0, s)
                              : mx::broadcast_to(mx::expand_dims(inputs[1], 0, s), prepend(v, inputs[1].shape()), s);
        if (axes[2] >= 0) {  // weights per example: one pass each (rare; the layer's own vmap is MLX's conv)
          auto w = mx::moveaxis(inputs[2], axes[2], 0, s);
          std::vector<mx::array> ys;
          for (int k = 0; k < v; ++k) {
            ys.push_back(wino_pass(s, kind_, g_, {mx::take(a, k, 0, s), mx::take(x, k, 0, s), mx::take(w, k, 0, s)}));
          }
          return {{mx::stack(ys, 0, s)}, {0}};
        }
        auto m = mx::reshape(mx::moveaxis(a, 0, 1, s), {16, v * a.shape(2), a.shape(3)}, s);
        x = mx::reshape(x, {v * x.shape(1), x.shape(2), x.shape(3), x.shape(4)}, s);
        auto y = wino_pass(s, kind_, g, {m, x, inputs[2]});
        return {{mx::reshape(y, prepend(v, {static_cast<int>(g_.n), y.shape(1), y.shape(2), y.shape(3)}), s)}, {0}};
      }
    }
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<Winograd>(*this, other)) return false;
    auto& o = static_cast<const Winograd&>(other);
    return kind_ == o.kind_ && g_ == o.g_;
  }

 private:
  WinoKind kind_;
  WinoGeometry g_;
};

mx::array wino_pass(mx::Stream s, WinoKind kind, const WinoGeometry& g, std::vector<mx::array> in) {
  mx::Shape shape;
  switch (kind) {
    case WinoKind::weight: shape = {16, in[0].shape(-1), in[0].shape(0)}; break;
    case WinoKind::input: shape = {16, static_cast<int>(g.tiles()), in[0].shape(3)}; break;
    case WinoKind::output:
      shape = {static_cast<int>(g.n), static_cast<int>(g.ho), static_cast<int>(g.wo), in[0].shape(2)};
      break;
  }
  return mx::array(std::move(shape), mx::float32, std::make_shared<Winograd>(s, kind, g), std::move(in));
}

// w (C_out, 3, 3, C_in) -> U (16, C_in, C_out), cached per weight array unless `cache` is false or w is traced.
mx::array winograd_weight_op(const mx::array& w, bool cache) {
  auto s = cpu_stream("winograd_weight");
  if (w.ndim() != 4 || w.shape(1) != 3 || w.shape(2) != 3) fail("winograd_weight", "w must be (C_out, 3, 3, C_in)");
  check_f32(w, "winograd_weight", "w");
  auto& store = WinogradCache::get();
  cache = cache && !w.is_tracer() && store.enabled();
  if (cache) {
    if (auto hit = store.lookup(w)) return *hit;
  }
  auto u = wino_pass(s, WinoKind::weight, WinoGeometry{}, {w});
  if (cache) store.insert(w, u);
  return u;
}

WinoGeometry wino_geometry(const mx::array& x, int64_t lo_h, int64_t lo_w, int64_t ho, int64_t wo,
                           const char* what) {
  if (lo_h < 0 || lo_w < 0 || ho <= 0 || wo <= 0) fail(what, "padding must be non-negative and the output non-empty");
  WinoGeometry g;
  g.n = x.shape(0);
  g.h = x.shape(1);
  g.w = x.shape(2);
  g.c = x.shape(3);
  g.lo_h = lo_h;
  g.lo_w = lo_w;
  g.ho = ho;
  g.wo = wo;
  if (g.n <= 0 || g.c <= 0) fail(what, "x must have a batch and channels");
  return g;
}

// x (N, H, W, C) -> V (16, T, C) for an output of ho x wo with lo_h / lo_w zero rows / columns before the input.
// The Winograd transforms of the kD depth taps of a 3-d conv weight (C_out, kD, 3, 3, C_in), stacked as
// (kD, 16, C_in, C_out) and cached by the 5-d weight like winograd_weight: 3-d convs run as 2-d convs per depth tap
// (layers/conv.py), and a tap sliced per call would be a new array, never found in the cache.
mx::array winograd_weight_taps_op(const mx::array& w, bool cache) {
  auto s = cpu_stream("winograd_weight_taps");
  if (w.ndim() != 5 || w.shape(2) != 3 || w.shape(3) != 3) {
    fail("winograd_weight_taps", "w must be (C_out, kD, 3, 3, C_in)");
  }
  check_f32(w, "winograd_weight_taps", "w");
  auto& store = WinogradCache::get();
  cache = cache && !w.is_tracer() && store.enabled();
  if (cache) {
    if (auto hit = store.lookup(w)) return *hit;
  }
  const int c_out = w.shape(0), c_in = w.shape(4);
  std::vector<mx::array> taps;
  for (int j = 0; j < w.shape(1); ++j) {
    auto tap = mx::reshape(mx::slice(w, {0, j, 0, 0, 0}, {c_out, j + 1, 3, 3, c_in}, s), {c_out, 3, 3, c_in}, s);
    taps.push_back(wino_pass(s, WinoKind::weight, WinoGeometry{}, {tap}));
  }
  auto u = mx::stack(taps, 0, s);
  if (cache) store.insert(w, u);
  return u;
}

mx::array winograd_input_op(const mx::array& x, int64_t lo_h, int64_t lo_w, int64_t ho, int64_t wo) {
  auto s = cpu_stream("winograd_input");
  if (x.ndim() != 4) fail("winograd_input", "x must be (N, H, W, C)");
  check_f32(x, "winograd_input", "x");
  auto g = wino_geometry(x, lo_h, lo_w, ho, wo, "winograd_input");
  return wino_pass(s, WinoKind::input, g, {x});
}

// M (16, T, C_out) -> y (N, ho, wo, C_out) with T = N * ceil(ho/2) * ceil(wo/2); x (N, H, W, C_in) and
// w (C_out, 3, 3, C_in) are the conv's input and weight (tiles with non-finite outputs are redone directly).
mx::array winograd_output_op(const mx::array& m, const mx::array& x, const mx::array& w, int64_t lo_h, int64_t lo_w,
                             int64_t ho, int64_t wo) {
  auto s = cpu_stream("winograd_output");
  if (m.ndim() != 3 || m.shape(0) != 16) fail("winograd_output", "m must be (16, T, C_out)");
  if (x.ndim() != 4) fail("winograd_output", "x must be (N, H, W, C_in)");
  if (w.ndim() != 4 || w.shape(1) != 3 || w.shape(2) != 3 || w.shape(3) != x.shape(3) || w.shape(0) != m.shape(2)) {
    fail("winograd_output", "w must be (C_out, 3, 3, C_in) matching m and x");
  }
  check_f32(m, "winograd_output", "m");
  check_f32(x, "winograd_output", "x");
  check_f32(w, "winograd_output", "w");
  auto g = wino_geometry(x, lo_h, lo_w, ho, wo, "winograd_output");
  if (g.tiles() != m.shape(1)) fail("winograd_output", "m's tile count does not match N * ceil(ho/2) * ceil(wo/2)");
  return wino_pass(s, WinoKind::output, g, {m, x, w});
}

std::vector<int64_t> winograd_cache_info() { return WinogradCache::get().info(); }
void winograd_cache_clear() { WinogradCache::get().clear(); }
void winograd_cache_set_limit(int64_t bytes) { WinogradCache::get().set_limit(bytes); }

void bind_winograd(nb::module_& m) {
  m.def("winograd_weight", &porter::winograd_weight_op, nb::arg("w"), nb::arg("cache") = true);
  m.def("winograd_weight_taps", &porter::winograd_weight_taps_op, nb::arg("w"), nb::arg("cache") = true);
  m.def("winograd_input", &porter::winograd_input_op, nb::arg("x"), nb::arg("lo_h"), nb::arg("lo_w"), nb::arg("ho"),
        nb::arg("wo"));
  m.def("winograd_output", &porter::winograd_output_op, nb::arg("m"), nb::arg("x"), nb::arg("w"), nb::arg("lo_h"),
        nb::arg("lo_w"), nb::arg("ho"), nb::arg("wo"));
  m.def("winograd_cache_info", &porter::winograd_cache_info);
  m.def("winograd_cache_clear", &porter::winograd_cache_clear);
  m.def("winograd_cache_set_limit", &porter::winograd_cache_set_limit, nb::arg("bytes"));
}

}  // namespace porter
