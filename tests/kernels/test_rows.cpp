// Row kernels (layer norm, bias, softmax, cross-entropy) and embeddings
// against float64 recomputation; backward kernels also against central
// differences of the float64 forward.
#include <gtest/gtest.h>

#include <bit>

#include <cmath>
#include <functional>
#include <vector>

#include "kernels/reference.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/kernels/kernels.hpp"

namespace mantissa::kernels {
namespace {

using test::kEps32;
using test::random_floats;
using test::to_double;

// ---- layer norm -----------------------------------------------------------------
// Float64 forward; returns out and fills mean/rstd.
std::vector<double> layernorm_ref(const std::vector<double>& x, const std::vector<double>& w,
                                  const std::vector<double>& b, int64_t N, int64_t C,
                                  std::vector<double>* mean = nullptr, std::vector<double>* rstd = nullptr) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < C; ++j) m += x[i * C + j];
    m /= C;
    for (int64_t j = 0; j < C; ++j) v += (x[i * C + j] - m) * (x[i * C + j] - m);
    const double r = 1.0 / std::sqrt(v / C + 1e-5);
    for (int64_t j = 0; j < C; ++j) out[i * C + j] = (x[i * C + j] - m) * r * w[j] + b[j];
    if (mean) mean->push_back(m);
    if (rstd) rstd->push_back(r);
  }
  return out;
}

TEST(LayerNorm, ForwardMatchesFloat64) {
  const int64_t N = 300, C = 256;  // 76800 elements: threaded
  auto x = random_floats(N * C, 1, -2.0f, 3.0f), w = random_floats(C, 2), b = random_floats(C, 3);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  std::vector<double> m_ref, r_ref;
  auto ref = layernorm_ref(to_double(x), to_double(w), to_double(b), N, C, &m_ref, &r_ref);
  // fp32 sums over C=256 terms: relative error ~ C u on the statistics.
  test::expect_near_all(out, ref, 0, 300 * kEps32 * 4, "layernorm out");
  test::expect_near_all(mean, m_ref, 0, 300 * kEps32 * 3, "mean");
  test::expect_near_all(rstd, r_ref, 300 * kEps32, 0, "rstd");
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  const int64_t N = 5, C = 24;
  auto x = random_floats(N * C, 4, -2.0f, 2.0f), w = random_floats(C, 5), b = random_floats(C, 6);
  auto g = random_floats(N * C, 7);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  std::vector<float> dx(N * C, 0.5f), dw(C, -0.25f), db(C, 1.0f);
  layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  // L = sum g * layernorm(x, w, b) in float64; central differences, h = 1e-6.
  auto xd = to_double(x), wd = to_double(w), bd = to_double(b);
  auto loss = [&]() {
    auto o = layernorm_ref(xd, wd, bd, N, C);
    double L = 0;
    for (size_t i = 0; i < o.size(); ++i) L += o[i] * g[i];
    return L;
  };
  auto fd = [&](std::vector<double>& v, size_t i) {
    const double h = 1e-6, keep = v[i];
    v[i] = keep + h;
    const double up = loss();
    v[i] = keep - h;
    const double down = loss();
    v[i] = keep;
    return (up - down) / (2 * h);
  };
  for (size_t i = 0; i < xd.size(); ++i) EXPECT_NEAR(dx[i], 0.5 + fd(xd, i), 2e-5) << "dx " << i;
  for (size_t j = 0; j < wd.size(); ++j) EXPECT_NEAR(dw[j], -0.25 + fd(wd, j), 2e-5) << "dw " << j;
  for (size_t j = 0; j < bd.size(); ++j) EXPECT_NEAR(db[j], 1.0 + fd(bd, j), 2e-5) << "db " << j;
}

TEST(LayerNorm, BackwardThreadedMatchesFloat64Formula) {
  const int64_t N = 256, C = 192;
  auto x = random_floats(N * C, 8, -2.0f, 2.0f), w = random_floats(C, 9), b = random_floats(C, 10);
  auto g = random_floats(N * C, 11);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  std::vector<float> dx(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  std::vector<double> m, r;
  layernorm_ref(to_double(x), to_double(w), to_double(b), N, C, &m, &r);
  std::vector<double> dx_ref(N * C), dw_ref(C, 0.0), db_ref(C, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    double a = 0, c = 0;
    for (int64_t j = 0; j < C; ++j) {
      const double norm = (x[i * C + j] - m[i]) * r[i];
      a += w[j] * g[i * C + j];
      c += w[j] * g[i * C + j] * norm;
      dw_ref[j] += norm * g[i * C + j];
      db_ref[j] += g[i * C + j];
    }
    a /= C;
    c /= C;
    for (int64_t j = 0; j < C; ++j) {
      const double norm = (x[i * C + j] - m[i]) * r[i];
      dx_ref[i * C + j] = (w[j] * g[i * C + j] - a - norm * c) * r[i];
    }
  }
  test::expect_near_all(dx, dx_ref, 0, 1e-4, "dx");
  test::expect_near_all(dw, dw_ref, 0, 64 * N * kEps32, "dweight");
  test::expect_near_all(db, db_ref, 0, 4 * N * kEps32 * N, "dbias");
}

// ---- bias ----------------------------------------------------------------------------
// Layer norm backward reading x as bf16 codes equals the fp32 kernel on the
// widened codes bit for bit (dx, dweight, dbias), threaded size.
TEST(LayerNorm, BackwardBf16InputMatchesWidenedFp32) {
  const int64_t N = 300, C = 192;
  auto x = random_floats(N * C, 41, -3.0f, 3.0f);
  auto g = random_floats(N * C, 42);
  auto w = random_floats(C, 43, 0.5f, 1.5f), b = random_floats(C, 44);
  std::vector<uint16_t> x16(N * C);
  f32_to_bf16(x16.data(), x.data(), N * C);
  std::vector<float> wide(N * C), y(N * C), mean(N), rstd(N);
  for (int64_t i = 0; i < N * C; ++i) wide[i] = test::round_to_bf16(x[i]);
  layernorm_forward(y.data(), mean.data(), rstd.data(), wide.data(), w.data(), b.data(), N, C);
  std::vector<float> dx1(N * C, 0.5f), dx2(N * C, 0.5f), dw1(C, 0.0f), dw2(C, 0.0f), db1(C, 0.0f), db2(C, 0.0f);
  layernorm_backward(dx1.data(), dw1.data(), db1.data(), g.data(), wide.data(), w.data(), mean.data(), rstd.data(), N, C);
  layernorm_backward_bf16x(dx2.data(), dw2.data(), db2.data(), g.data(), x16.data(), w.data(), mean.data(),
                           rstd.data(), N, C);
  for (int64_t i = 0; i < N * C; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(dx1[i]), std::bit_cast<uint32_t>(dx2[i])) << i;
  for (int64_t j = 0; j < C; ++j) {
    ASSERT_EQ(std::bit_cast<uint32_t>(dw1[j]), std::bit_cast<uint32_t>(dw2[j])) << j;
    ASSERT_EQ(std::bit_cast<uint32_t>(db1[j]), std::bit_cast<uint32_t>(db2[j])) << j;
  }
  EXPECT_NE(dw2[0], 0.0f);
}

// Layer norm backward reading x as 1-byte codes (FP8 saved activations)
// equals the fp32 kernel on the decoded values (code value x fold) bit for bit.
TEST(LayerNorm, BackwardCodesInputMatchesDecodedFp32) {
  const int64_t N = 300, C = 192;
  const mantissa::formats::Format& f = mantissa::formats::preset("e4m3fn");
  mantissa::formats::Table16 table{};
  for (uint32_t c = 0; c < 256; ++c)
    table[c] = static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(mantissa::formats::decode_f32(f, c))) >> 16);
  const float fold = 1.0f / 64;
  std::vector<uint8_t> codes(N * C);
  std::vector<float> wide(N * C);
  for (int64_t i = 0; i < N * C; ++i) {
    const uint32_t c = static_cast<uint32_t>((i * 131 + 7) % 256);
    codes[i] = static_cast<uint8_t>((c & 0x7F) == 0x7F ? c - 1 : c);  // no NaN codes
    wide[i] = static_cast<float>(mantissa::formats::decode_f32(f, codes[i])) * fold;
  }
  auto g = random_floats(N * C, 45);
  auto w = random_floats(C, 46, 0.5f, 1.5f), b = random_floats(C, 47);
  std::vector<float> y(N * C), mean(N), rstd(N);
  layernorm_forward(y.data(), mean.data(), rstd.data(), wide.data(), w.data(), b.data(), N, C);
  std::vector<float> dx1(N * C, 0.5f), dx2(N * C, 0.5f), dw1(C, 0.0f), dw2(C, 0.0f), db1(C, 0.0f), db2(C, 0.0f);
  layernorm_backward(dx1.data(), dw1.data(), db1.data(), g.data(), wide.data(), w.data(), mean.data(), rstd.data(), N, C);
  layernorm_backward_codes(dx2.data(), dw2.data(), db2.data(), g.data(), codes.data(), table, fold, w.data(),
                           mean.data(), rstd.data(), N, C);
  for (int64_t i = 0; i < N * C; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(dx1[i]), std::bit_cast<uint32_t>(dx2[i])) << i;
  for (int64_t j = 0; j < C; ++j) {
    ASSERT_EQ(std::bit_cast<uint32_t>(dw1[j]), std::bit_cast<uint32_t>(dw2[j])) << j;
    ASSERT_EQ(std::bit_cast<uint32_t>(db1[j]), std::bit_cast<uint32_t>(db2[j])) << j;
  }
  EXPECT_NE(dw2[0], 0.0f);
}

TEST(Bias, AddAndColumnSums) {
  const int64_t N = 333, C = 200;
  auto x = random_floats(N * C, 12), bias = random_floats(C, 13), g = random_floats(N * C, 14);
  std::vector<float> out(N * C), db(C, 2.0f);
  bias_add(out.data(), x.data(), bias.data(), N, C);
  for (int64_t i = 0; i < N * C; ++i) ASSERT_EQ(out[i], static_cast<float>(double(x[i]) + bias[i % C]));
  bias_backward(db.data(), g.data(), N, C);
  std::vector<double> want(C, 2.0);
  for (int64_t i = 0; i < N * C; ++i) want[i % C] += g[i];
  test::expect_near_all(db, want, 0, N * kEps32 * 2, "dbias");
}

// ---- softmax --------------------------------------------------------------------------
TEST(Softmax, ForwardAndBackwardMatchFloat64) {
  const int64_t N = 200, C = 257;
  auto x = random_floats(N * C, 15, -20.0f, 20.0f), dy = random_floats(N * C, 16);
  std::vector<float> y(N * C), dx(N * C, 0.125f);
  softmax_forward(y.data(), x.data(), N, C);
  softmax_backward(dx.data(), y.data(), dy.data(), N, C);
  std::vector<double> y_ref(N * C), dx_ref(N * C);
  for (int64_t i = 0; i < N; ++i) {
    double mx = -1e300, s = 0, dot = 0;
    for (int64_t j = 0; j < C; ++j) mx = std::max(mx, double(x[i * C + j]));
    for (int64_t j = 0; j < C; ++j) s += std::exp(x[i * C + j] - mx);
    for (int64_t j = 0; j < C; ++j) y_ref[i * C + j] = std::exp(x[i * C + j] - mx) / s;
    for (int64_t j = 0; j < C; ++j) dot += y_ref[i * C + j] * dy[i * C + j];
    for (int64_t j = 0; j < C; ++j) dx_ref[i * C + j] = 0.125 + y_ref[i * C + j] * (dy[i * C + j] - dot);
  }
  test::expect_near_all(y, y_ref, 8 * kEps32 + C * kEps32, 1e-12, "softmax");
  test::expect_near_all(dx, dx_ref, 0, 1e-6, "softmax backward");
}

// ---- cross-entropy -----------------------------------------------------------------------
TEST(CrossEntropy, LossGradientAndIgnoredRows) {
  const int64_t N = 150, V = 301;
  auto logits = random_floats(N * V, 17, -8.0f, 8.0f);
  std::vector<int32_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[i] = i % 7 == 3 ? -1 : static_cast<int32_t>((i * 37) % V);
  std::vector<float> losses(N, -5.0f), dlogits(N * V, 99.0f);
  int64_t count = -1;
  const float gs = 1.0f / 128;
  const double total = cross_entropy(logits.data(), targets.data(), N, V, gs, losses.data(),
                                     dlogits.data(), &count);
  double want_total = 0;
  int64_t want_count = 0;
  std::vector<double> want_loss(N, 0.0), want_grad(N * V, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    if (targets[i] < 0) continue;
    double mx = -1e300, s = 0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, double(logits[i * V + j]));
    for (int64_t j = 0; j < V; ++j) s += std::exp(logits[i * V + j] - mx);
    want_loss[i] = std::log(s) + mx - logits[i * V + targets[i]];
    want_total += want_loss[i];
    ++want_count;
    for (int64_t j = 0; j < V; ++j) {
      want_grad[i * V + j] = gs * (std::exp(logits[i * V + j] - mx) / s - (j == targets[i] ? 1.0 : 0.0));
    }
  }
  EXPECT_EQ(count, want_count);
  // Per-row: fp32 exp/sum over V terms and the log: ~ V u relative on the sum.
  test::expect_near_all(losses, want_loss, 0, 16 * V * kEps32, "losses");
  EXPECT_NEAR(total, want_total, N * 16 * V * kEps32);
  test::expect_near_all(dlogits, want_grad, 0, gs * 8 * V * kEps32, "dlogits");

  // Loss only (no gradient), null losses buffer.
  int64_t count2 = 0;
  EXPECT_EQ(cross_entropy(logits.data(), targets.data(), N, V, gs, nullptr, nullptr, &count2), total);
  EXPECT_EQ(count2, want_count);
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  const int64_t N = 3, V = 11;
  auto logits = random_floats(N * V, 18, -3.0f, 3.0f);
  const std::vector<int32_t> targets = {4, -1, 10};
  std::vector<float> dlogits(N * V);
  int64_t count = 0;
  cross_entropy(logits.data(), targets.data(), N, V, 1.0f, nullptr, dlogits.data(), &count);
  auto ld = to_double(logits);
  auto loss = [&]() {
    double L = 0;
    for (int64_t i = 0; i < N; ++i) {
      if (targets[i] < 0) continue;
      double s = 0;
      for (int64_t j = 0; j < V; ++j) s += std::exp(ld[i * V + j]);
      L += std::log(s) - ld[i * V + targets[i]];
    }
    return L;
  };
  for (size_t k = 0; k < ld.size(); ++k) {
    const double h = 1e-6, keep = ld[k];
    ld[k] = keep + h;
    const double up = loss();
    ld[k] = keep - h;
    const double down = loss();
    ld[k] = keep;
    EXPECT_NEAR(dlogits[k], (up - down) / (2 * h), 1e-6) << k;
  }
}

TEST(CrossEntropy, RejectsTargetOutsideVocabulary) {
  const std::vector<float> logits(8, 0.0f);
  const std::vector<int32_t> targets = {1, 4};
  EXPECT_THROW(cross_entropy(logits.data(), targets.data(), 2, 4, 1.0f, nullptr, nullptr, nullptr),
               std::invalid_argument);
}

// ---- embeddings ---------------------------------------------------------------------------
TEST(Embedding, ForwardAndScatterBackwardWithRepeats) {
  const int64_t B = 6, T = 40, C = 160, V = 50;
  auto wte = random_floats(V * C, 19), wpe = random_floats(T * C, 20), g = random_floats(B * T * C, 21);
  std::vector<int32_t> tokens(B * T);
  for (int64_t i = 0; i < B * T; ++i) tokens[i] = static_cast<int32_t>((i * i + 3) % 13);  // many repeats
  std::vector<float> out(B * T * C), dwte(V * C, 0.5f), dwpe(T * C, -0.5f);
  embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  embedding_backward(dwte.data(), dwpe.data(), g.data(), tokens.data(), B, T, C);
  std::vector<double> dwte_ref(V * C, 0.5), dwpe_ref(T * C, -0.5);
  for (int64_t i = 0; i < B * T; ++i) {
    for (int64_t j = 0; j < C; ++j) {
      ASSERT_EQ(out[i * C + j], static_cast<float>(double(wte[tokens[i] * C + j]) + wpe[(i % T) * C + j]));
      dwte_ref[tokens[i] * C + j] += g[i * C + j];
      dwpe_ref[(i % T) * C + j] += g[i * C + j];
    }
  }
  test::expect_near_all(dwte, dwte_ref, 0, 64 * kEps32 * 16, "dwte");
  test::expect_near_all(dwpe, dwpe_ref, 0, 8 * kEps32 * 8, "dwpe");
  const std::vector<int32_t> bad = {0, -2};
  EXPECT_THROW(embedding_forward(out.data(), bad.data(), wte.data(), wpe.data(), 1, 2, C), std::invalid_argument);
}

}  // namespace
}  // namespace mantissa::kernels
