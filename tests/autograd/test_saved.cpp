// Activations saved for backward in 1 byte (PrecisionPolicy::saved = e4m3fn,
// the FP8 recipes): the codes against the scalar reference rounding, and for
// every op that saves through Tape::save, its gradient against the gradient
// with fp32 saves within a bound derived from e4m3fn's precision. A saved
// value x comes back as x~ with |x~ - x| <= delta(x) = u |x| + h s: u = eps/2
// (round to nearest), h = half the smallest subnormal, s = 2^E the tensor's
// scale. The bounds below propagate delta through each backward formula
// (first order; second-order terms are u times smaller and covered by the
// factor kSecondOrder).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "autograd/gradcheck.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"

using namespace mantissa;
using gradcheck::random_vec;
using gradcheck::to_tensor;
using gradcheck::Vec;
namespace ag = mantissa::autograd;

namespace {
const formats::Format& e4m3() { return formats::preset("e4m3fn"); }
constexpr double kSecondOrder = 1.25;
constexpr double kFp32Slop = 1e-5;  // the two runs' own fp32 rounding, relative to the gradient's scale

// The scale 2^E of a tensor with this amax: E minimal with amax 2^-E <= max.
double scale_for(double amax) {
  if (amax == 0) return 1;
  int e = -130;
  while (std::ldexp(amax, -e) > e4m3().max()) ++e;
  return std::ldexp(1.0, e);
}

double amax(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// delta(x) for every element of a tensor saved with its own amax.
Vec deltas(const Vec& v) {
  const double u = e4m3().epsilon() / 2, h = e4m3().min_subnormal() / 2, s = scale_for(amax(v));
  Vec d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = u * std::abs(v[i]) + h * s;
  return d;
}

Vec as_vec(const Tensor& t) {
  auto f = t.to_vector();
  return Vec(f.begin(), f.end());
}

ag::OpContext policy(DType saved) {
  ag::OpContext ctx;
  ctx.policy.saved = saved;
  return ctx;
}

// Runs `op` on leaves holding `inputs` under a saved-activation policy (fp32
// products) and backpropagates `dy`; returns each input's gradient.
template <class Op>
std::vector<Vec> gradients(DType saved, const std::vector<std::pair<Shape, Vec>>& inputs, const Vec& dy, Op op) {
  ag::Tape t(policy(saved));
  std::vector<ag::Var> vars;
  for (const auto& [shape, v] : inputs) vars.push_back(t.leaf(to_tensor(shape, v)));
  ag::Var y = op(t, vars);
  t.backward(y, to_tensor(y.shape(), dy));
  std::vector<Vec> out;
  for (const ag::Var& v : vars) out.push_back(as_vec(v.node->grad));
  return out;
}

// |got - want| <= bound + slop for every element; and the saves did change something.
void expect_within(const Vec& got, const Vec& want, const Vec& bound, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  const double slop = kFp32Slop * std::max(1.0, amax(want));
  double diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::abs(got[i] - want[i]), bound[i] + slop) << what << " element " << i;
    diff = std::max(diff, std::abs(got[i] - want[i]));
  }
  EXPECT_GT(diff, 0.0) << what << ": the 1-byte saves made no difference";
}
}  // namespace

TEST(SavedActivations, CodesMatchTheReferenceRoundingWithAPerTensorScale) {
  const Vec v = random_vec(5000, 1, -37.0, 37.0);
  ag::Tape t(policy(DType::e4m3fn));
  const Tensor x = to_tensor({5000}, v);
  EXPECT_EQ(t.save(x).dtype(), DType::bf16);  // read without a scale by some callers
  const Tensor saved = t.save_compact(x);
  ASSERT_EQ(saved.dtype(), DType::e4m3fn);
  EXPECT_EQ(saved.bytes(), 5000u);
  const double s = scale_for(amax(as_vec(x)));
  EXPECT_EQ(saved.scale(), s);
  const Vec back = as_vec(ag::Tape::restore(saved));
  const Tensor back16 = ag::Tape::restore_bf16(saved);
  ASSERT_EQ(back16.dtype(), DType::bf16);
  const Vec b16 = as_vec(back16);
  const auto xf = x.to_vector();
  for (size_t i = 0; i < v.size(); ++i) {
    const float scaled = static_cast<float>(xf[i] / s);  // exact: s is a power of two
    const double want = formats::decode_f32(e4m3(), formats::encode(e4m3(), scaled)) * s;
    ASSERT_EQ(back[i], want) << i;
    ASSERT_EQ(b16[i], want) << i;  // exact in bf16 too
  }
  // A bf16 tensor (attention probabilities) encodes the same way.
  const Tensor x16 = x.to(DType::bf16);
  const Vec from16 = as_vec(ag::Tape::restore(t.save_compact(x16)));
  const auto x16v = x16.to_vector();
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(from16[i], formats::decode_f32(e4m3(), formats::encode(e4m3(), static_cast<float>(x16v[i] / s))) * s);
}

// A save site's last exponent is tried first (SavedScaleHints): whether the
// hint is right, too small (the first pass overflows) or too large, the codes
// and scale are those of the two-pass encode; a moved exponent costs a second
// encode, which is counted, and becomes the site's next hint.
TEST(SavedActivations, HintedSavesEqualTheTwoPassEncode) {
  const int64_t n = 3 * 4096 + 100;  // several chunks, a short last one
  Vec v = random_vec(static_cast<size_t>(n), 7, -3.0, 3.0);
  v[5000] = 40.0;  // the amax, in the second chunk
  auto bits_of = [](const Tensor& t) {
    std::vector<uint8_t> b(t.data<uint8_t>(), t.data<uint8_t>() + t.numel());
    return b;
  };
  for (bool with_inf : {false, true}) {
    Tensor x = to_tensor({n}, v);
    if (with_inf) x.f32()[9000] = std::numeric_limits<float>::infinity();  // its chunk does not count
    const Tensor want = ag::Tape::encode_scaled(x, DType::e4m3fn);
    const int e = static_cast<int>(std::lround(std::log2(want.scale())));
    EXPECT_EQ(want.scale(), scale_for(40.0));
    for (int hint : {e, e - 3, e + 2, ag::SavedScaleHints::kNone}) {
      int h = hint;
      bool again = true;
      const Tensor got = ag::Tape::encode_scaled(x, DType::e4m3fn, &h, &again);
      EXPECT_EQ(got.scale(), want.scale()) << "hint " << hint;
      EXPECT_EQ(bits_of(got), bits_of(want)) << "hint " << hint << (with_inf ? " with inf" : "");
      EXPECT_EQ(h, e);
      EXPECT_EQ(again, hint != e && hint != ag::SavedScaleHints::kNone) << "hint " << hint;
    }
  }
  // Through the tape: sites in save order, hints kept across passes.
  ag::OpContext ctx = policy(DType::e4m3fn);
  ctx.policy.saved_hints = std::make_shared<ag::SavedScaleHints>();
  const Tensor small = to_tensor({n}, random_vec(static_cast<size_t>(n), 8, -0.01, 0.01));
  const Tensor big = to_tensor({n}, v);
  for (int pass = 0; pass < 3; ++pass) {
    ag::Tape t(ctx);
    const Tensor a = t.save_compact(pass == 2 ? big : small);  // site 0 moves on the third pass
    const Tensor b = t.save_compact(big);
    EXPECT_EQ(bits_of(a), bits_of(ag::Tape::encode_scaled(pass == 2 ? big : small, DType::e4m3fn))) << pass;
    EXPECT_EQ(b.scale(), scale_for(40.0));
  }
  EXPECT_EQ(ctx.policy.saved_hints->saves, 6);
  EXPECT_EQ(ctx.policy.saved_hints->reencodes, 1);
  ASSERT_EQ(ctx.policy.saved_hints->exponent.size(), 2u);
}

// Layer norm saves x - mean in one pass: the same codes and scale as saving
// the difference computed first, with and without hints.
TEST(SavedActivations, CentredSaveEqualsSavingTheDifference) {
  const int64_t rows = 37, cols = 300;  // rows straddle the 4096-element chunks
  const Vec v = random_vec(static_cast<size_t>(rows * cols), 9, -2.0, 6.0);
  const Vec mu = random_vec(static_cast<size_t>(rows), 10, 1.0, 3.0);
  const Tensor x = to_tensor({rows, cols}, v), mean = to_tensor({rows}, mu);
  Tensor diff = Tensor::empty({rows, cols});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) diff.f32()[r * cols + c] = x.f32()[r * cols + c] - mean.f32()[r];
  const Tensor want = ag::Tape::encode_scaled(diff, DType::e4m3fn);
  ag::OpContext ctx = policy(DType::e4m3fn);
  for (bool hints : {false, true}) {
    ctx.policy.saved_hints = hints ? std::make_shared<ag::SavedScaleHints>() : nullptr;
    ag::Tape t(ctx);
    const Tensor got = t.save_centered(x, mean);
    ASSERT_EQ(got.scale(), want.scale());
    for (int64_t i = 0; i < want.numel(); ++i) ASSERT_EQ(got.data<uint8_t>()[i], want.data<uint8_t>()[i]) << i;
  }
  ag::Tape t(ctx);
  EXPECT_THROW(t.save_centered(x, to_tensor({rows - 1}, Vec(static_cast<size_t>(rows - 1), 0.0))), std::invalid_argument);
  ag::Tape wide(policy(DType::bf16));
  EXPECT_THROW(wide.save_centered(x, mean), std::logic_error);
}

TEST(SavedActivations, NonFiniteValuesStayNonFinite) {
  ag::Tape t(policy(DType::e4m3fn));
  Tensor x = to_tensor({4}, {1.0, -2.0, 0.5, 0.0});
  x.f32()[3] = std::numeric_limits<float>::infinity();
  const auto back = ag::Tape::restore(t.save_compact(x)).to_vector();
  EXPECT_EQ(back[0], 1.0f);  // the scale comes from the finite values
  EXPECT_EQ(back[1], -2.0f);
  EXPECT_FALSE(std::isfinite(back[3]));
}

TEST(SavedActivations, GeluGradientWithinTheE4m3Bound) {
  const size_t n = 4096;
  const Vec x = random_vec(n, 2, -6, 6), dy = random_vec(n, 3);
  auto op = [](ag::Tape& t, std::vector<ag::Var>& v) { return ag::gelu(t, v[0]); };
  const Vec g32 = gradients(DType::f32, {{{4096}, x}}, dy, op)[0];
  const Vec g8 = gradients(DType::e4m3fn, {{{4096}, x}}, dy, op)[0];
  // |gelu'(x~) - gelu'(x)| <= max |gelu''| delta(x); the max from a fine grid.
  auto gelu_grad = [](double v) {
    const double k = std::sqrt(2.0 / M_PI), th = std::tanh(k * (v + 0.044715 * v * v * v));
    return 0.5 * (1 + th) + 0.5 * v * (1 - th * th) * k * (1 + 3 * 0.044715 * v * v);
  };
  double g2 = 0;
  for (double v = -10; v <= 10; v += 1e-3) g2 = std::max(g2, std::abs(gelu_grad(v + 1e-5) - gelu_grad(v - 1e-5)) / 2e-5);
  const Vec d = deltas(x);
  Vec bound(n);
  for (size_t i = 0; i < n; ++i) bound[i] = std::abs(dy[i]) * 1.01 * g2 * d[i];
  expect_within(g8, g32, bound, "gelu dx");
}

TEST(SavedActivations, ReluAndMulGradientsWithinTheE4m3Bound) {
  const size_t n = 2048;
  const Vec a = random_vec(n, 4, -3, 3), b = random_vec(n, 5, -5, 5), dy = random_vec(n, 6);
  auto mul = [](ag::Tape& t, std::vector<ag::Var>& v) { return ag::mul(t, v[0], v[1]); };
  const auto g32 = gradients(DType::f32, {{{2048}, a}, {{2048}, b}}, dy, mul);
  const auto g8 = gradients(DType::e4m3fn, {{{2048}, a}, {{2048}, b}}, dy, mul);
  const Vec da = deltas(a), db = deltas(b);
  Vec bound_a(n), bound_b(n);
  for (size_t i = 0; i < n; ++i) {
    bound_a[i] = std::abs(dy[i]) * db[i];  // d a = dy b~
    bound_b[i] = std::abs(dy[i]) * da[i];
  }
  expect_within(g8[0], g32[0], bound_a, "mul da");
  expect_within(g8[1], g32[1], bound_b, "mul db");
  // ReLU keeps the sign, so its gradient is exact for all but values that
  // round to zero (|x| <= h s), none here.
  auto relu = [](ag::Tape& t, std::vector<ag::Var>& v) { return ag::relu(t, v[0]); };
  EXPECT_EQ(gradients(DType::e4m3fn, {{{2048}, a}}, dy, relu)[0], gradients(DType::f32, {{{2048}, a}}, dy, relu)[0]);
}

TEST(SavedActivations, SoftmaxGradientWithinTheE4m3Bound) {
  const int64_t N = 16, C = 24;
  const Vec x = random_vec(N * C, 7, -4, 4), dy = random_vec(N * C, 8);
  auto op = [](ag::Tape& t, std::vector<ag::Var>& v) { return ag::softmax(t, v[0]); };
  const Vec g32 = gradients(DType::f32, {{{N, C}, x}}, dy, op)[0];
  const Vec g8 = gradients(DType::e4m3fn, {{{N, C}, x}}, dy, op)[0];
  // dx = y (dy - D), D = sum y dy, with the saved y~: |d dx| <= dy~ |dy - D| + y |dD|, |dD| <= sum dy~ |dy|.
  ag::Tape t;
  const Vec y = as_vec(ag::softmax(t, t.leaf(to_tensor({N, C}, x), false)).value);
  const Vec d = deltas(y);
  Vec bound(static_cast<size_t>(N * C));
  for (int64_t r = 0; r < N; ++r) {
    double D = 0, dD = 0;
    for (int64_t c = 0; c < C; ++c) {
      const auto i = static_cast<size_t>(r * C + c);
      D += y[i] * dy[i];
      dD += d[i] * std::abs(dy[i]);
    }
    for (int64_t c = 0; c < C; ++c) {
      const auto i = static_cast<size_t>(r * C + c);
      bound[i] = kSecondOrder * (d[i] * std::abs(dy[i] - D) + y[i] * dD);
    }
  }
  expect_within(g8, g32, bound, "softmax dx");
}

TEST(SavedActivations, LayerNormGradientWithinTheE4m3Bound) {
  // Rows with a large shared offset: the saved copy is x - mean, so the
  // offset costs no precision.
  const int64_t N = 64, C = 32;
  Vec x = random_vec(N * C, 9, -1, 1);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < C; ++c) x[static_cast<size_t>(r * C + c)] += 40.0 + r;
  const Vec w = random_vec(C, 10, 0.5, 1.5), b = random_vec(C, 11), dy = random_vec(N * C, 12);
  auto op = [](ag::Tape& t, std::vector<ag::Var>& v) { return ag::layer_norm(t, v[0], v[1], v[2]); };
  const std::vector<std::pair<Shape, Vec>> in = {{{N, C}, x}, {{C}, w}, {{C}, b}};
  const auto g32 = gradients(DType::f32, in, dy, op);
  const auto g8 = gradients(DType::e4m3fn, in, dy, op);
  // Reference statistics (float64) and the centred input's deltas.
  Vec cen(x.size()), rstd(static_cast<size_t>(N));
  for (int64_t r = 0; r < N; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += static_cast<float>(x[static_cast<size_t>(r * C + c)]);
    m /= C;
    for (int64_t c = 0; c < C; ++c) {
      cen[static_cast<size_t>(r * C + c)] = static_cast<float>(x[static_cast<size_t>(r * C + c)]) - m;
      v += cen[static_cast<size_t>(r * C + c)] * cen[static_cast<size_t>(r * C + c)];
    }
    rstd[static_cast<size_t>(r)] = 1.0 / std::sqrt(v / C + 1e-5);
  }
  Vec d = deltas(cen);
  for (double& e : d) e *= 1.0 + 1e-6;  // the kernel's fp32 mean differs from the float64 one in the last bits
  // xhat = c r; g = w dy; m = mean(g xhat); dx = r (g - mean g - xhat m).
  // |d xhat| <= r delta; |d m| <= M = mean(|g| r delta);
  // |d dx_i| <= r (r delta_i |m| + (|xhat_i| + r delta_i) M); |d dw_j| <= sum_rows |dy| r delta.
  Vec bdx(x.size()), bdw(static_cast<size_t>(C), 0.0);
  for (int64_t r = 0; r < N; ++r) {
    const double rs = rstd[static_cast<size_t>(r)];
    double m = 0, M = 0;
    for (int64_t c = 0; c < C; ++c) {
      const auto i = static_cast<size_t>(r * C + c);
      const double g = w[static_cast<size_t>(c)] * dy[i];
      m += g * cen[i] * rs / C;
      M += std::abs(g) * rs * d[i] / C;
      bdw[static_cast<size_t>(c)] += kSecondOrder * std::abs(dy[i]) * rs * d[i];
    }
    for (int64_t c = 0; c < C; ++c) {
      const auto i = static_cast<size_t>(r * C + c);
      bdx[i] = kSecondOrder * rs * (rs * d[i] * std::abs(m) + (std::abs(cen[i]) * rs + rs * d[i]) * M);
    }
  }
  expect_within(g8[0], g32[0], bdx, "layer_norm dx");
  expect_within(g8[1], g32[1], bdw, "layer_norm dweight");
  const double slop = kFp32Slop * std::max(1.0, amax(g32[2]));
  for (size_t c = 0; c < g32[2].size(); ++c) EXPECT_NEAR(g8[2][c], g32[2][c], slop) << "dbias does not use x";
}

TEST(SavedActivations, AttentionGradientWithinTheE4m3Bound) {
  // fp32 products: q, k, v and the probabilities are the only inputs that change.
  const int64_t B = 2, T = 8, C = 16, H = 2, hs = C / H;
  const Vec qkv = random_vec(B * T * 3 * C, 13, -2, 2), dout = random_vec(B * T * C, 14);
  auto op = [H](ag::Tape& t, std::vector<ag::Var>& v) { return ag::causal_self_attention(t, v[0], H); };
  const Vec g32 = gradients(DType::f32, {{{B, T, 3 * C}, qkv}}, dout, op)[0];
  const Vec g8 = gradients(DType::e4m3fn, {{{B, T, 3 * C}, qkv}}, dout, op)[0];
  // Reference P per head (float64) and first-order bounds of
  //   dV = P^T dO, dP = dO V^T, D = rowsum(P dP), dS = P (dP - D) / sqrt(hs), dQ = dS K, dK = dS^T Q
  // with |dq|, |dk|, |dv| <= delta(qkv) and |dP| <= delta(P) (P saved with its own amax).
  const Vec dq = deltas(qkv);
  auto at = [&](const Vec& v, int64_t b, int64_t t, int64_t part, int64_t h, int64_t j) {
    return v[static_cast<size_t>((b * T + t) * 3 * C + part * C + h * hs + j)];
  };
  std::vector<Vec> P(static_cast<size_t>(B * H), Vec(static_cast<size_t>(T * T), 0.0));
  double pmax = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        Vec s(static_cast<size_t>(i + 1));
        double mx = -1e300, z = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t k = 0; k < hs; ++k) dot += at(qkv, b, i, 0, h, k) * at(qkv, b, j, 1, h, k);
          s[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        for (double& e : s) z += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= i; ++j) {
          P[static_cast<size_t>(b * H + h)][static_cast<size_t>(i * T + j)] = s[static_cast<size_t>(j)] / z;
          pmax = std::max(pmax, s[static_cast<size_t>(j)] / z);
        }
      }
  const double u = e4m3().epsilon() / 2, hsub = e4m3().min_subnormal() / 2, sp = scale_for(pmax);
  Vec bound(qkv.size(), 0.0);
  auto add = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t j, double v) {
    bound[static_cast<size_t>((b * T + t) * 3 * C + part * C + h * hs + j)] += kSecondOrder * v;
  };
  const double rs = 1.0 / std::sqrt(static_cast<double>(hs));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const Vec& p = P[static_cast<size_t>(b * H + h)];
      auto dO = [&](int64_t t, int64_t j) { return dout[static_cast<size_t>((b * T + t) * C + h * hs + j)]; };
      Vec dP(static_cast<size_t>(T * T), 0.0), edP(dP.size(), 0.0), dS(dP.size(), 0.0), edS(dP.size(), 0.0);
      for (int64_t i = 0; i < T; ++i) {
        double D = 0, eD = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const auto ij = static_cast<size_t>(i * T + j);
          for (int64_t k = 0; k < hs; ++k) {
            dP[ij] += dO(i, k) * at(qkv, b, j, 2, h, k);
            edP[ij] += std::abs(dO(i, k)) * at(dq, b, j, 2, h, k);
          }
          const double ep = u * p[ij] + hsub * sp;
          D += p[ij] * dP[ij];
          eD += ep * std::abs(dP[ij]) + p[ij] * edP[ij];
        }
        for (int64_t j = 0; j <= i; ++j) {
          const auto ij = static_cast<size_t>(i * T + j);
          const double ep = u * p[ij] + hsub * sp;
          dS[ij] = p[ij] * (dP[ij] - D) * rs;
          edS[ij] = (ep * std::abs(dP[ij] - D) + p[ij] * (edP[ij] + eD)) * rs;
        }
      }
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j <= i; ++j) {
          const auto ij = static_cast<size_t>(i * T + j);
          const double ep = u * p[ij] + hsub * sp;
          for (int64_t k = 0; k < hs; ++k) {
            add(b, i, 0, h, k, edS[ij] * std::abs(at(qkv, b, j, 1, h, k)) + std::abs(dS[ij]) * at(dq, b, j, 1, h, k));
            add(b, j, 1, h, k, edS[ij] * std::abs(at(qkv, b, i, 0, h, k)) + std::abs(dS[ij]) * at(dq, b, i, 0, h, k));
            add(b, j, 2, h, k, ep * std::abs(dO(i, k)));
          }
        }
    }
  expect_within(g8, g32, bound, "attention dqkv");
}

TEST(SavedActivations, MatrixProductsKeepA16BitOperandUnderAOneBytePolicy) {
  // fp32 products keep their input through Tape::save, which reads it back
  // without a scale: under a 1-byte policy it is a bf16 copy.
  const Vec x = random_vec(64 * 32, 15, -3, 3), w = random_vec(32 * 16, 16), dy = random_vec(64 * 16, 17);
  auto op = [](ag::Tape& t, std::vector<ag::Var>& v) { return ag::linear(t, v[0], v[1]); };
  const std::vector<std::pair<Shape, Vec>> in = {{{64, 32}, x}, {{32, 16}, w}};
  EXPECT_EQ(gradients(DType::e4m3fn, in, dy, op), gradients(DType::bf16, in, dy, op));
}
