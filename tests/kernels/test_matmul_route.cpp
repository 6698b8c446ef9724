// The routes of bf16-valued products (matmul_route.hpp) against a float64
// reference and against each other: every route within the fp32 accumulation
// bound of the exact product; routes bit for bit equal where the summation
// order cannot matter (integer-valued operands whose sums are exact in fp32);
// the widened route bit for bit equal to the fp32 product of the widened
// operands (same primitive, same order); packed weights per route and version.
#include "mantissa/kernels/matmul_route.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/reference.hpp"
#include "mantissa/kernels/matmul.hpp"

namespace mantissa::kernels {
namespace {

using test::kEps32;

// The routes this CPU can run (oneDNN has no bf16 matmul on AVX2); the ones
// left out are named once on stdout with the reason.
const std::vector<Bf16Route>& routes() {
  static const std::vector<Bf16Route> out = [] {
    std::vector<Bf16Route> v;
    for (Bf16Route r : {Bf16Route::onednn_bf16, Bf16Route::f32_widened}) {
      std::string why;
      if (route_available(r, &why)) {
        v.push_back(r);
      } else {
        std::printf("[ route skipped ] %s: %s\n", route_name(r), why.c_str());
      }
    }
    return v;
  }();
  return out;
}

#define SKIP_WITHOUT_BF16_ROUTE()                                                      \
  do {                                                                                 \
    std::string why;                                                                   \
    if (!route_available(Bf16Route::onednn_bf16, &why)) GTEST_SKIP() << "onednn_bf16: " << why; \
  } while (0)

// Restores the ISA rule after a test that forces routes.
struct RouteGuard {
  ~RouteGuard() { set_bf16_route(std::nullopt); }
};

struct Operands {
  std::vector<float> a, b;        // bf16-valued fp32
  std::vector<uint16_t> a16, b16;  // their bf16 codes
};

std::vector<uint16_t> codes_of(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(v[i]) >> 16);
  return out;
}

Operands make_operands(size_t a_n, size_t b_n, uint32_t seed, bool integers) {
  Operands o;
  o.a = test::random_floats(a_n, seed, integers ? -8.0f : -1.0f, integers ? 8.0f : 1.0f);
  o.b = test::random_floats(b_n, seed + 1, integers ? -8.0f : -1.0f, integers ? 8.0f : 1.0f);
  for (auto* v : {&o.a, &o.b})
    for (auto& x : *v) x = integers ? std::round(x) : test::round_to_bf16(x);
  o.a16 = codes_of(o.a);
  o.b16 = codes_of(o.b);
  return o;
}

MatmulArgs args_of(int64_t batch, int64_t M, int64_t N, int64_t K, bool ta, bool tb, float alpha, DType type) {
  return MatmulArgs::product(M, N, K, ta, tb).with_batch(batch).with_alpha(alpha).with_types(type, type);
}

// float64 product and the fp32 accumulation bound of each element.
void reference(const MatmulArgs& g, const Operands& o, std::vector<double>& want, std::vector<double>& tol) {
  want.assign(static_cast<size_t>(g.batch * g.M * g.N), 0.0);
  tol.assign(want.size(), 0.0);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t i = 0; i < g.M; ++i)
      for (int64_t j = 0; j < g.N; ++j) {
        double dot = 0, mag = 0;
        for (int64_t k = 0; k < g.K; ++k) {
          const double x = g.trans_a ? o.a[static_cast<size_t>((b * g.K + k) * g.M + i)]
                                     : o.a[static_cast<size_t>((b * g.M + i) * g.K + k)];
          const double y = g.trans_b ? o.b[static_cast<size_t>((b * g.N + j) * g.K + k)]
                                     : o.b[static_cast<size_t>((b * g.K + k) * g.N + j)];
          dot += x * y;
          mag += std::abs(x * y);
        }
        const size_t idx = static_cast<size_t>((b * g.M + i) * g.N + j);
        want[idx] = g.alpha * dot;
        tol[idx] = (static_cast<double>(g.K) + 2.0) * kEps32 * std::abs(g.alpha) * mag;
      }
}

std::vector<float> run(Bf16Route r, const MatmulArgs& g, const Operands& o) {
  set_bf16_route(r);
  std::vector<float> c(static_cast<size_t>(g.batch * g.M * g.N), 0.0f);
  matmul(g, o.a16.data(), o.b16.data(), c.data());
  return c;
}

std::string shape_of(const MatmulArgs& g) {
  return "batch=" + std::to_string(g.batch) + " M=" + std::to_string(g.M) + " N=" + std::to_string(g.N) +
         " K=" + std::to_string(g.K) + " ta=" + std::to_string(g.trans_a) + " tb=" + std::to_string(g.trans_b);
}

TEST(MatmulRoute, EveryRouteWithinTheFp32BoundOfFloat64AndOfEachOther) {
  RouteGuard guard;
  for (int64_t batch : {1, 2})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{37, 29, 53}, {64, 96, 256}}) {
          const MatmulArgs g = args_of(batch, M, N, K, ta, tb, 0.375f, DType::bf16);
          SCOPED_TRACE(shape_of(g));
          const Operands o = make_operands(static_cast<size_t>(batch * M * K), static_cast<size_t>(batch * K * N),
                                           static_cast<uint32_t>(M + K + batch), false);
          std::vector<double> want, tol;
          reference(g, o, want, tol);
          std::vector<std::vector<float>> got;
          for (Bf16Route r : routes()) {
            got.push_back(run(r, g, o));
            std::vector<double> t = tol;
            for (auto& x : t) x += 1e-30;
            for (size_t i = 0; i < want.size(); ++i)
              ASSERT_LE(std::abs(got.back()[i] - want[i]), t[i]) << route_name(r) << " element " << i;
          }
          for (size_t r = 1; r < got.size(); ++r)
            for (size_t i = 0; i < want.size(); ++i)
              ASSERT_LE(std::abs(got[0][i] - got[r][i]), 2.0 * tol[i] + 1e-30) << "routes differ at " << i;
        }
}

// Small integers: every product and partial sum is an integer below 2^24,
// exact in fp32 whatever the order, so the routes must agree bit for bit and
// equal the float64 product exactly.
TEST(MatmulRoute, RoutesAgreeBitForBitWhenTheSumIsExact) {
  SKIP_WITHOUT_BF16_ROUTE();
  RouteGuard guard;
  const MatmulArgs g = args_of(3, 48, 40, 96, false, true, 1.0f, DType::bf16);
  const Operands o = make_operands(3 * 48 * 96, 3 * 96 * 40, 7u, true);
  std::vector<double> want, tol;
  reference(g, o, want, tol);
  const std::vector<float> x = run(Bf16Route::onednn_bf16, g, o), y = run(Bf16Route::f32_widened, g, o);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(static_cast<double>(x[i]), want[i]) << "onednn_bf16 at " << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(x[i]), std::bit_cast<uint32_t>(y[i])) << "routes differ at " << i;
  }
}

// The widened route is the fp32 product of the widened operands: same
// primitive, same summation order, so the same bits; mixed f32 x bf16 rounds
// the f32 operand to bf16 first, as the bf16 route does.
TEST(MatmulRoute, WidenedRouteIsTheFp32ProductOfTheBf16Values) {
  RouteGuard guard;
  for (bool tb : {false, true}) {
    MatmulArgs g = args_of(1, 70, 45, 130, false, tb, 0.5f, DType::bf16);
    const Operands o = make_operands(70 * 130, 130 * 45, 11u, false);
    const std::vector<float> widened = run(Bf16Route::f32_widened, g, o);
    MatmulArgs f = g;
    f.a_type = f.b_type = DType::f32;
    std::vector<float> fp32(widened.size());
    matmul(f, o.a.data(), o.b.data(), fp32.data());
    EXPECT_EQ(std::memcmp(widened.data(), fp32.data(), fp32.size() * sizeof(float)), 0) << "tb=" << tb;

    // A as unrounded fp32: rounded to bf16 on either route; the results equal
    // the all-bf16 product of the rounded values on the same route.
    std::vector<float> a_raw = test::random_floats(70 * 130, 12u);
    Operands rounded = o;
    for (size_t i = 0; i < a_raw.size(); ++i) rounded.a[i] = test::round_to_bf16(a_raw[i]);
    rounded.a16 = codes_of(rounded.a);
    for (Bf16Route r : routes()) {
      set_bf16_route(r);
      MatmulArgs m = g;
      m.a_type = DType::f32;
      std::vector<float> mixed(widened.size());
      matmul(m, a_raw.data(), o.b16.data(), mixed.data());
      const std::vector<float> same = run(r, g, rounded);
      EXPECT_EQ(std::memcmp(mixed.data(), same.data(), same.size() * sizeof(float)), 0) << route_name(r);
    }
  }
}

// A weight B packed per route: the same key and version seen by a bf16
// product on each route and by an fp32 product of different values must not
// share a packed copy; a new version repacks on the widened route too.
TEST(MatmulRoute, PackedWeightsPerRouteAndVersion) {
  RouteGuard guard;
  const int64_t M = 64, N = 96, K = 128;
  Operands o = make_operands(M * K, K * N, 21u, false);
  const std::vector<float> b_raw = test::random_floats(static_cast<size_t>(K * N), 22u);  // not bf16-valued
  const void* key = o.b16.data();
  MatmulArgs g = args_of(1, M, N, K, false, false, 1.0f, DType::bf16);
  g.b_is_constant = true;
  g.b_cache_key = key;
  std::vector<double> want, tol;
  for (int version : {0, 1}) {
    g.b_cache_version = version;
    reference(g, o, want, tol);
    for (Bf16Route r : routes()) {
      const std::vector<float> c = run(r, g, o);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_LE(std::abs(c[i] - want[i]), tol[i] + 1e-30) << route_name(r) << " v" << version << " at " << i;
      MatmulArgs f = g;  // fp32 values under the same key and version
      f.a_type = f.b_type = DType::f32;
      std::vector<float> cf(want.size());
      matmul(f, o.a.data(), b_raw.data(), cf.data());
      Operands raw = o;
      raw.b = b_raw;
      std::vector<double> want_f, tol_f;
      reference(f, raw, want_f, tol_f);
      for (size_t i = 0; i < want_f.size(); ++i)
        ASSERT_LE(std::abs(cf[i] - want_f[i]), tol_f[i] + 1e-30) << "fp32 beside " << route_name(r) << " at " << i;
    }
    // Next version: new bf16 values in the same buffer (the key stays).
    for (auto& x : o.b) x = test::round_to_bf16(-0.5f * x + 0.25f);
    const std::vector<uint16_t> next = codes_of(o.b);
    std::copy(next.begin(), next.end(), o.b16.begin());
    ASSERT_EQ(static_cast<const void*>(o.b16.data()), key);
  }
  forget_packed_operand(key);
}

// Strided row ranges (blockwise attention) widen the span they read.
TEST(MatmulRoute, StridedOperandsOnEveryRoute) {
  RouteGuard guard;
  const int64_t batch = 3, T = 11, K = 8, M = 4, N = 7, r0 = 5;
  const Operands o = make_operands(batch * T * K, batch * T * K, 31u, false);
  for (Bf16Route r : routes()) {
    set_bf16_route(r);
    std::vector<float> C(static_cast<size_t>(batch * T * N), -7.0f);
    MatmulArgs g = args_of(batch, M, N, K, false, true, 0.5f, DType::bf16);
    g.a_batch_stride = g.b_batch_stride = T * K;
    g.c_batch_stride = T * N;
    matmul(g, o.a16.data() + r0 * K, o.b16.data(), C.data() + r0 * N);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < N; ++j) {
          const float got = C[static_cast<size_t>((b * T + t) * N + j)];
          if (t < r0 || t >= r0 + M) {
            ASSERT_EQ(got, -7.0f) << route_name(r) << " wrote outside the rows";
            continue;
          }
          double dot = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double p = static_cast<double>(o.a[static_cast<size_t>((b * T + t) * K + k)]) *
                             o.b[static_cast<size_t>((b * T + j) * K + k)];
            dot += p;
            mag += std::abs(p);
          }
          ASSERT_NEAR(got, 0.5 * dot, (K + 2) * kEps32 * mag + 1e-30) << route_name(r);
        }
  }
}

// Without an override the route follows oneDNN's ISA and the measured rates: bf16 on AMX or
// where vdpbf16ps outruns FMA 1.5x, else widened.
TEST(MatmulRoute, DefaultRouteFollowsTheIsa) {
  RouteGuard guard;
  set_bf16_route(std::nullopt);
  const char* env = std::getenv("MANTISSA_BF16_MATMUL");
  if (env != nullptr && *env != '\0' && std::strcmp(env, "auto") != 0) GTEST_SKIP() << "route forced by the environment";
  const bool bf16_wins = matmul_isa_has_amx() || bf16_dot_to_fma_ratio() >= 1.5;
  EXPECT_EQ(bf16_route(), bf16_wins ? Bf16Route::onednn_bf16 : Bf16Route::f32_widened);
  const std::string s = matmul_route_summary();
  EXPECT_NE(s.find(route_name(bf16_route())), std::string::npos) << s;
  EXPECT_NE(s.find(matmul_isa_name()), std::string::npos) << s;
  std::printf("%s\n", s.c_str());
}

// A route the CPU cannot run is refused with the reason, not a oneDNN error.
TEST(MatmulRoute, UnavailableRouteIsRefusedWithTheReason) {
  RouteGuard guard;
  std::string why;
  if (route_available(Bf16Route::onednn_bf16, &why)) GTEST_SKIP() << "onednn_bf16 runs on this CPU";
  const MatmulArgs g = args_of(1, 4, 4, 4, false, false, 1.0f, DType::bf16);
  const Operands o = make_operands(16, 16, 3u, false);
  try {
    run(Bf16Route::onednn_bf16, g, o);
    FAIL() << "onednn_bf16 ran on a CPU without it";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mantissa::kernels
