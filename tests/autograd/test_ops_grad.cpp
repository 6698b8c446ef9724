// Every op's forward against a float64 re-implementation and its backward
// against float64 central finite differences of that re-implementation.
#include <cmath>
#include <numbers>

#include "autograd/gradcheck.hpp"
#include "reference_ops.hpp"

using namespace gradcheck;
using mantissa::DType;

namespace {

// Row-major [M, K] @ [K, N] with optional transposed storage.
Vec ref_matmul(const Vec& a, const Vec& b, int64_t batch, int64_t M, int64_t N, int64_t K, bool ta, bool tb) {
  Vec c(static_cast<size_t>(batch * M * N), 0.0);
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          double av = ta ? a[p * M * K + k * M + i] : a[p * M * K + i * K + k];
          double bv = tb ? b[p * K * N + j * K + k] : b[p * K * N + k * N + j];
          s += av * bv;
        }
        c[p * M * N + i * N + j] = s;
      }
  return c;
}

double gelu64(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// Values bounded away from zero so ReLU's kink is never crossed by h.
Vec away_from_zero(size_t n, uint64_t seed) {
  Vec v = random_vec(n, seed);
  for (auto& x : v) x = (x < 0 ? -0.05 : 0.05) + x;
  return v;
}

Tensor ids_tensor(const std::vector<int32_t>& ids, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::i32);
  for (size_t i = 0; i < ids.size(); ++i) t.data<int32_t>()[i] = ids[i];
  return t;
}

}  // namespace

TEST(OpsGrad, LinearWithBias) {
  const int64_t M = 6, K = 5, N = 4;
  check("linear", {{{2, 3, K}, random_vec(M * K, 1)}, {{K, N}, random_vec(K * N, 2)}, {{N}, random_vec(N, 3)}},
        [&](const std::vector<Vec>& v) {
          Vec y = ref_matmul(v[0], v[1], 1, M, N, K, false, false);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) y[i * N + j] += v[2][j];
          return y;
        },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::linear(t, x[0], x[1], &x[2]); });
}

TEST(OpsGrad, LinearNoBiasConstantInput) {
  const int64_t M = 3, K = 7, N = 2;
  check("linear without bias", {{{M, K}, random_vec(M * K, 4), false}, {{K, N}, random_vec(K * N, 5)}},
        [&](const std::vector<Vec>& v) { return ref_matmul(v[0], v[1], 1, M, N, K, false, false); },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::linear(t, x[0], x[1]); });
}

TEST(OpsGrad, MatmulAllTranspositions) {
  const int64_t M = 4, K = 3, N = 5;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Shape sa = ta ? Shape{K, M} : Shape{M, K}, sb = tb ? Shape{N, K} : Shape{K, N};
      check("matmul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
            {{sa, random_vec(M * K, 10 + ta)}, {sb, random_vec(K * N, 20 + tb)}},
            [&](const std::vector<Vec>& v) { return ref_matmul(v[0], v[1], 1, M, N, K, ta, tb); },
            [&](ag::Tape& t, std::vector<ag::Var>& x) { return ag::matmul(t, x[0], x[1], ta, tb); });
    }
}

TEST(OpsGrad, BatchedMatmul) {
  const int64_t P = 3, M = 2, K = 4, N = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Shape sa = ta ? Shape{P, K, M} : Shape{P, M, K}, sb = tb ? Shape{P, N, K} : Shape{P, K, N};
      check("bmm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
            {{sa, random_vec(P * M * K, 30 + ta)}, {sb, random_vec(P * K * N, 40 + tb)}},
            [&](const std::vector<Vec>& v) { return ref_matmul(v[0], v[1], P, M, N, K, ta, tb); },
            [&](ag::Tape& t, std::vector<ag::Var>& x) { return ag::bmm(t, x[0], x[1], ta, tb); });
    }
}

TEST(OpsGrad, LinearScalesMultiplyEachGradient) {
  // Unit-scaling hook: forward x alpha, input grad x beta, weight/bias grads x gamma.
  const int64_t M = 4, K = 3, N = 2;
  Vec xv = random_vec(M * K, 50), wv = random_vec(K * N, 51), bv = random_vec(N, 52), R = random_vec(M * N, 53);
  std::vector<std::vector<float>> grads[2];
  std::vector<float> outs[2];
  const ag::OpScales scaled{2.0f, 3.0f, 5.0f};
  for (int run = 0; run < 2; ++run) {
    ag::Tape t;
    ag::Var x = t.leaf(to_tensor({M, K}, xv)), w = t.leaf(to_tensor({K, N}, wv)), b = t.leaf(to_tensor({N}, bv));
    ag::Var y = ag::linear(t, x, w, &b, run ? scaled : ag::OpScales{});
    outs[run] = y.value.to_vector();
    t.backward(y, to_tensor({M, N}, R));
    grads[run] = {x.node->grad.to_vector(), w.node->grad.to_vector(), b.node->grad.to_vector()};
  }
  Vec xw = ref_matmul(xv, wv, 1, M, N, K, false, false);
  for (int64_t i = 0; i < M * N; ++i) EXPECT_NEAR(outs[1][i], 2.0 * xw[i] + bv[i % N], 1e-5);
  const float mult[3] = {3.0f, 5.0f, 5.0f};
  for (int k = 0; k < 3; ++k)
    for (size_t i = 0; i < grads[0][k].size(); ++i)
      EXPECT_NEAR(grads[1][k][i], mult[k] * grads[0][k][i], 1e-5 * std::abs(mult[k] * grads[0][k][i]) + 1e-6);
}

TEST(OpsGrad, AddMulScale) {
  const Shape s{3, 4};
  check("add", {{s, random_vec(12, 60)}, {s, random_vec(12, 61)}},
        [](const std::vector<Vec>& v) { Vec y(12); for (int i = 0; i < 12; ++i) y[i] = v[0][i] + v[1][i]; return y; },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::add(t, x[0], x[1]); });
  check("mul", {{s, random_vec(12, 62)}, {s, random_vec(12, 63)}},
        [](const std::vector<Vec>& v) { Vec y(12); for (int i = 0; i < 12; ++i) y[i] = v[0][i] * v[1][i]; return y; },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::mul(t, x[0], x[1]); });
  check("scale", {{s, random_vec(12, 64)}},
        [](const std::vector<Vec>& v) { Vec y(12); for (int i = 0; i < 12; ++i) y[i] = -1.75 * v[0][i]; return y; },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::scale(t, x[0], -1.75f); });
  // The same value used twice: gradients from both uses must add up (x * x + x).
  check("fan-out", {{s, random_vec(12, 65)}},
        [](const std::vector<Vec>& v) { Vec y(12); for (int i = 0; i < 12; ++i) y[i] = v[0][i] * v[0][i] + v[0][i]; return y; },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::add(t, ag::mul(t, x[0], x[0]), x[0]); });
  check("add_bias", {{{3, 4}, random_vec(12, 66)}, {{4}, random_vec(4, 67)}},
        [](const std::vector<Vec>& v) { Vec y(12); for (int i = 0; i < 12; ++i) y[i] = v[0][i] + v[1][i % 4]; return y; },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::add_bias(t, x[0], x[1]); });
}

TEST(OpsGrad, Activations) {
  const int n = 40;
  check("gelu", {{{4, 10}, random_vec(n, 70, -4, 4)}},
        [](const std::vector<Vec>& v) { Vec y(v[0].size()); for (size_t i = 0; i < y.size(); ++i) y[i] = gelu64(v[0][i]); return y; },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::gelu(t, x[0]); });
  check("gelu erf", {{{4, 10}, random_vec(n, 72, -6, 6)}},
        [](const std::vector<Vec>& v) {
          Vec y(v[0].size());
          for (size_t i = 0; i < y.size(); ++i) y[i] = v[0][i] * 0.5 * std::erfc(-v[0][i] / std::numbers::sqrt2);
          return y;
        },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::gelu(t, x[0], ag::GeluForm::erf); });
  check("relu", {{{4, 10}, away_from_zero(n, 71)}},
        [](const std::vector<Vec>& v) { Vec y(v[0].size()); for (size_t i = 0; i < y.size(); ++i) y[i] = std::max(0.0, v[0][i]); return y; },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::relu(t, x[0]); });
}

TEST(OpsGrad, DropoutMaskIsConsistentAndSeeded) {
  const int n = 2000;
  const double p = 0.25;
  std::vector<float> first_out;
  Vec mask(n, 0.0);
  check("dropout", {{{n}, away_from_zero(n, 72)}},
        [&](const std::vector<Vec>& v) { Vec y(n); for (int i = 0; i < n; ++i) y[i] = v[0][i] * mask[i] / (1 - p); return y; },
        [&](ag::Tape& t, std::vector<ag::Var>& x) {
          t.ctx().seed = 99;
          ag::Var y = ag::dropout(t, x[0], static_cast<float>(p));
          first_out = y.value.to_vector();
          for (int i = 0; i < n; ++i) mask[i] = first_out[i] != 0.0f ? 1.0 : 0.0;
          return y;
        });
  double kept = 0;
  for (double m : mask) kept += m;
  // Binomial(2000, 0.75): mean 1500, sd 19.4; 6 sd.
  EXPECT_NEAR(kept, 1500, 6 * 19.4);
  // Same seed and call number -> same mask; the next call gets a different one.
  ag::Tape t;
  t.ctx().seed = 99;
  ag::Var x = t.constant(to_tensor({n}, away_from_zero(n, 72)));
  EXPECT_EQ(ag::dropout(t, x, static_cast<float>(p)).value.to_vector(), first_out);
  EXPECT_NE(ag::dropout(t, x, static_cast<float>(p)).value.to_vector(), first_out);
  t.ctx().training = false;
  EXPECT_TRUE(ag::dropout(t, x, static_cast<float>(p)).value.same_storage(x.value));
}

TEST(OpsGrad, Softmax) {
  const int64_t N = 3, C = 7;
  check("softmax", {{{N, C}, random_vec(N * C, 80, -3, 3)}},
        [&](const std::vector<Vec>& v) {
          Vec y(N * C);
          for (int64_t r = 0; r < N; ++r) {
            double m = -1e300, s = 0;
            for (int64_t c = 0; c < C; ++c) m = std::max(m, v[0][r * C + c]);
            for (int64_t c = 0; c < C; ++c) s += std::exp(v[0][r * C + c] - m);
            for (int64_t c = 0; c < C; ++c) y[r * C + c] = std::exp(v[0][r * C + c] - m) / s;
          }
          return y;
        },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::softmax(t, x[0]); });
}

Vec ref_layer_norm(const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t C) {
  Vec y(N * C);
  for (int64_t r = 0; r < N; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mean += x[r * C + c];
    mean /= C;
    for (int64_t c = 0; c < C; ++c) var += (x[r * C + c] - mean) * (x[r * C + c] - mean);
    var /= C;
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = (x[r * C + c] - mean) * rstd * w[c] + b[c];
  }
  return y;
}

TEST(OpsGrad, LayerNorm) {
  const int64_t N = 5, C = 8;
  check("layer_norm", {{{N, C}, random_vec(N * C, 90, -2, 2)}, {{C}, random_vec(C, 91, 0.5, 1.5)}, {{C}, random_vec(C, 92)}},
        [&](const std::vector<Vec>& v) { return ref_layer_norm(v[0], v[1], v[2], N, C); },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::layer_norm(t, x[0], x[1], x[2]); },
        1e-5, 2e-4);
}

TEST(OpsGrad, CausalSelfAttention) {
  const int64_t B = 2, T = 5, C = 8, NH = 2;
  check("attention", {{{B, T, 3 * C}, random_vec(B * T * 3 * C, 100, -1.5, 1.5)}},
        [&](const std::vector<Vec>& v) { return mantissa::ref::fused_attention(v[0], B, T, C, NH).out; },
        [&](ag::Tape& t, std::vector<ag::Var>& x) { return ag::causal_self_attention(t, x[0], NH); },
        1e-5, 2e-4);
}

TEST(OpsGrad, Embeddings) {
  const int64_t V = 6, C = 3, B = 2, T = 4, Tmax = 5;
  const std::vector<int32_t> idv = {1, 5, 1, 0, 3, 3, 2, 1};  // repeats: scatter-add must sum
  Tensor ids = ids_tensor(idv, {B, T});
  check("embedding", {{{V, C}, random_vec(V * C, 110)}},
        [&](const std::vector<Vec>& v) {
          Vec y;
          for (int32_t id : idv)
            for (int64_t c = 0; c < C; ++c) y.push_back(v[0][id * C + c]);
          return y;
        },
        [&](ag::Tape& t, std::vector<ag::Var>& x) { return ag::embedding(t, ids, x[0]); });
  check("token_position_embedding", {{{V, C}, random_vec(V * C, 111)}, {{Tmax, C}, random_vec(Tmax * C, 112)}},
        [&](const std::vector<Vec>& v) {
          Vec y;
          for (int64_t i = 0; i < B * T; ++i)
            for (int64_t c = 0; c < C; ++c) y.push_back(v[0][idv[i] * C + c] + v[1][(i % T) * C + c]);
          return y;
        },
        [&](ag::Tape& t, std::vector<ag::Var>& x) { return ag::token_position_embedding(t, ids, x[0], x[1]); });
  ag::Tape t;
  ag::Var w = t.leaf(to_tensor({V, C}, random_vec(V * C, 113)));
  EXPECT_THROW(ag::embedding(t, ids_tensor({0, 6}, {2}), w), std::out_of_range);
}

TEST(OpsGrad, CrossEntropyWithIgnoreIndex) {
  const int64_t N = 5, V = 7;
  const std::vector<int32_t> tg = {3, -1, 0, 6, -1};
  Tensor targets = ids_tensor(tg, {N});
  ag::LossStats stats;
  check("cross_entropy", {{{N, V}, random_vec(N * V, 120, -3, 3)}},
        [&](const std::vector<Vec>& v) {
          double loss = 0;
          for (int64_t r = 0; r < N; ++r) {
            if (tg[r] < 0) continue;
            double m = -1e300, z = 0;
            for (int64_t c = 0; c < V; ++c) m = std::max(m, v[0][r * V + c]);
            for (int64_t c = 0; c < V; ++c) z += std::exp(v[0][r * V + c] - m);
            loss += m + std::log(z) - v[0][r * V + tg[r]];
          }
          return Vec{loss};
        },
        [&](ag::Tape& t, std::vector<ag::Var>& x) { return ag::cross_entropy(t, x[0], targets, &stats); });
  EXPECT_EQ(stats.count, 3);
}

TEST(OpsGrad, MeanSquaredError) {
  check("mse", {{{3, 4}, random_vec(12, 130)}, {{3, 4}, random_vec(12, 131)}},
        [](const std::vector<Vec>& v) {
          double s = 0;
          for (size_t i = 0; i < v[0].size(); ++i) s += (v[0][i] - v[1][i]) * (v[0][i] - v[1][i]);
          return Vec{s};
        },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::mse(t, x[0], x[1]); });
}

TEST(OpsGrad, ShapeOps) {
  // reshape then a non-linear use, so the gradient passes through a view.
  check("reshape", {{{2, 6}, random_vec(12, 140)}},
        [](const std::vector<Vec>& v) { Vec y(12); for (int i = 0; i < 12; ++i) y[i] = v[0][i] * v[0][i]; return y; },
        [](ag::Tape& t, std::vector<ag::Var>& x) { ag::Var r = ag::reshape(t, x[0], {3, -1}); return ag::mul(t, r, r); });
  check("transpose", {{{2, 3, 4}, random_vec(24, 141)}},
        [](const std::vector<Vec>& v) {
          Vec y(24);
          for (int b = 0; b < 2; ++b)
            for (int i = 0; i < 3; ++i)
              for (int j = 0; j < 4; ++j) y[b * 12 + j * 3 + i] = v[0][b * 12 + i * 4 + j];
          return y;
        },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::transpose(t, x[0]); });
  // split into 3 pieces and recombine in another order with different weights.
  check("split+concat", {{{3, 6}, random_vec(18, 142)}},
        [](const std::vector<Vec>& v) {
          Vec y;
          for (int r = 0; r < 3; ++r) {
            for (int c = 3; c < 6; ++c) y.push_back(2 * v[0][r * 6 + c]);
            for (int c = 0; c < 1; ++c) y.push_back(v[0][r * 6 + c]);
            for (int c = 1; c < 3; ++c) y.push_back(v[0][r * 6 + c] * v[0][r * 6 + c]);
          }
          return y;
        },
        [](ag::Tape& t, std::vector<ag::Var>& x) {
          auto parts = ag::split(t, x[0], {1, 2, 3});
          return ag::concat(t, {ag::scale(t, parts[2], 2.0f), parts[0], ag::mul(t, parts[1], parts[1])});
        });
}

TEST(OpsGrad, BadShapesAreRejected) {
  ag::Tape t;
  ag::Var a = t.leaf(Tensor::zeros({2, 3})), b = t.leaf(Tensor::zeros({4, 5}));
  EXPECT_THROW(ag::matmul(t, a, b), std::invalid_argument);
  EXPECT_THROW(ag::linear(t, a, b), std::invalid_argument);
  EXPECT_THROW(ag::add(t, a, b), std::invalid_argument);
  EXPECT_THROW(ag::split(t, a, {1, 1}), std::invalid_argument);
  EXPECT_THROW(ag::causal_self_attention(t, t.leaf(Tensor::zeros({1, 2, 9})), 2), std::invalid_argument);
}
