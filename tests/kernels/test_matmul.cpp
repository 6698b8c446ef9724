// matmul against a float64 reference: every transpose combination, batch,
// alpha, accumulate, bias, bf16, fp16 and mixed operands, and the packed-B cache.
#include "mantissa/kernels/matmul.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <utility>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/reference.hpp"
#include "mantissa/kernels/kernels.hpp"

namespace mantissa::kernels {
namespace {

using test::kEps32;
using test::random_floats;

struct Case {
  int64_t batch, M, N, K;
  bool ta, tb;
  float alpha;
  bool accumulate, bias;
  DType a_type, b_type;
};

std::string describe(const Case& c) {
  return "batch=" + std::to_string(c.batch) + " M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) +
         " K=" + std::to_string(c.K) + " ta=" + std::to_string(c.ta) + " tb=" + std::to_string(c.tb) +
         " alpha=" + std::to_string(c.alpha) + " acc=" + std::to_string(c.accumulate) +
         " bias=" + std::to_string(c.bias) + " a=" + dtype_name(c.a_type) + " b=" + dtype_name(c.b_type);
}

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(test::round_to_bf16(v[i]));
    out[i] = static_cast<uint16_t>(u >> 16);
  }
  return out;
}

// fp16 codes of v, nearest even (the compiler's _Float16 conversion, not mantissa's).
std::vector<uint16_t> to_f16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = std::bit_cast<uint16_t>(static_cast<_Float16>(v[i]));
  return out;
}
float round_to_f16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

// Runs one case and checks every element against the float64 product of the
// (bf16-rounded where the operand runs in bf16) inputs. Bound: fp32
// accumulation of K exact-or-rounded products, |err| <= 2 K u sum|a||b| (+ the
// final alpha scaling and accumulate/bias adds, a few u |result|).
void run_case(const Case& c) {
  SCOPED_TRACE(describe(c));
  const size_t a_n = static_cast<size_t>(c.batch * c.M * c.K), b_n = static_cast<size_t>(c.batch * c.K * c.N),
               c_n = static_cast<size_t>(c.batch * c.M * c.N);
  auto A = random_floats(a_n, 1u + static_cast<uint32_t>(c.M));
  auto B = random_floats(b_n, 2u + static_cast<uint32_t>(c.N));
  auto C0 = random_floats(c_n, 3u);
  auto bias = random_floats(static_cast<size_t>(c.N), 4u);
  const bool bf16 = c.a_type == DType::bf16 || c.b_type == DType::bf16;
  std::vector<float> Ar = A, Br = B;  // values the product really sees
  if (bf16) {
    for (auto& x : Ar) x = test::round_to_bf16(x);
    for (auto& x : Br) x = test::round_to_bf16(x);
  }
  // fp16 operands are multiplied as their exact values; an fp32 one beside them as it is
  if (c.a_type == DType::f16)
    for (auto& x : Ar) x = round_to_f16(x);
  if (c.b_type == DType::f16)
    for (auto& x : Br) x = round_to_f16(x);
  auto A16 = c.a_type == DType::f16 ? to_f16_bits(A) : to_bf16_bits(A);
  auto B16 = c.b_type == DType::f16 ? to_f16_bits(B) : to_bf16_bits(B);
  const void* a_ptr = c.a_type != DType::f32 ? static_cast<const void*>(A16.data()) : A.data();
  const void* b_ptr = c.b_type != DType::f32 ? static_cast<const void*>(B16.data()) : B.data();

  const MatmulArgs args = MatmulArgs::product(c.M, c.N, c.K, c.ta, c.tb)
                             .with_batch(c.batch)
                             .with_types(c.a_type, c.b_type)
                             .with_alpha(c.alpha)
                             .with_accumulate(c.accumulate);
  std::vector<float> C = C0;
  matmul(args, a_ptr, b_ptr, C.data(), c.bias ? bias.data() : nullptr);

  int failures = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t i = 0; i < c.M; ++i) {
      for (int64_t j = 0; j < c.N; ++j) {
        double dot = 0.0, mag = 0.0;
        for (int64_t k = 0; k < c.K; ++k) {
          const double a = c.ta ? Ar[static_cast<size_t>((b * c.K + k) * c.M + i)]
                                : Ar[static_cast<size_t>((b * c.M + i) * c.K + k)];
          const double bb = c.tb ? Br[static_cast<size_t>((b * c.N + j) * c.K + k)]
                                 : Br[static_cast<size_t>((b * c.K + k) * c.N + j)];
          dot += a * bb;
          mag += std::abs(a * bb);
        }
        const size_t idx = static_cast<size_t>((b * c.M + i) * c.N + j);
        double want = c.alpha * dot;
        if (c.bias) want += bias[static_cast<size_t>(j)];
        if (c.accumulate) want += C0[idx];
        const double tol = 2.0 * static_cast<double>(c.K + 2) * kEps32 * std::abs(c.alpha) * mag +
                           4.0 * kEps32 * (std::abs(want) + 1.0);
        if (!(std::abs(C[idx] - want) <= tol) && failures++ < 5) {
          ADD_FAILURE() << "C[" << b << "," << i << "," << j << "] = " << C[idx] << " want " << want
                        << " tol " << tol;
        }
      }
    }
  }
}

TEST(Matmul, AllTransposesBatchAlphaAccumulateBias) {
  for (int64_t batch : {1, 3}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (bool acc : {false, true}) {
          for (bool bias : {false, true}) {
            run_case({batch, 37, 29, 53, ta, tb, 1.0f, acc, bias, DType::f32, DType::f32});
            run_case({batch, 16, 64, 128, ta, tb, 0.125f, acc, bias, DType::f32, DType::f32});
          }
        }
      }
    }
  }
}

// FP8 recipes change alpha (the product of per-tensor scales) every step: one
// scaled primitive must serve every alpha, with alpha AB + bias (+ C) exact to
// rounding for each, in f32 and bf16, with bias and accumulate.
TEST(Matmul, AlphaIsARuntimeArgument) {
  const int64_t before = matmul_primitives_created();
  for (float alpha : {0.5f, 3.0f, 0.0078125f, -1.75f, 1e-3f}) {
    run_case({1, 33, 47, 65, false, true, alpha, false, true, DType::f32, DType::f32});
    run_case({1, 33, 47, 65, false, true, alpha, true, true, DType::f32, DType::f32});
    run_case({2, 24, 40, 72, true, false, alpha, true, false, DType::bf16, DType::bf16});
  }
  EXPECT_EQ(matmul_primitives_created() - before, 3) << "a new alpha created a new primitive";
  // alpha == 1 keeps its own primitive without scales (bias through oneDNN's bias).
  run_case({1, 33, 47, 65, false, true, 1.0f, false, true, DType::f32, DType::f32});
  EXPECT_EQ(matmul_primitives_created() - before, 4);
}

// Each way of applying alpha (post-op, output scale, a separate pass) gives
// alpha AB (+ C) (+ bias) to rounding on every layout, where oneDNN offers it;
// the automatic choice never runs oneDNN's reference matmul.
TEST(Matmul, EveryAlphaModeMatchesFloat64) {
  struct Reset {
    ~Reset() { force_alpha_mode(AlphaMode::none); }
  } reset;
  for (AlphaMode mode : {AlphaMode::post_op, AlphaMode::output_scale, AlphaMode::separate, AlphaMode::none}) {
    SCOPED_TRACE(alpha_mode_name(mode));
    force_alpha_mode(mode);
    for (int64_t batch : {1, 3}) {
      for (bool ta : {false, true}) {
        for (bool acc : {false, true}) {
          for (bool bias : {false, true}) {
            const Case c{batch, 19, 23, 41, ta, !ta, -0.3125f, acc, bias, DType::f32, DType::f32};
            try {
              run_case(c);
            } catch (const std::runtime_error& e) {
              // A forced mode oneDNN lacks here (e.g. scales on brgemm are
              // refused only by falling back): the error must say so.
              ASSERT_NE(mode, AlphaMode::none) << e.what();
              EXPECT_NE(std::string(e.what()).find("reference"), std::string::npos) << e.what();
              continue;
            }
            EXPECT_EQ(std::string(last_matmul_impl()).rfind("ref", 0), std::string::npos) << last_matmul_impl();
            if (mode != AlphaMode::none) {
              EXPECT_EQ(last_matmul_alpha_mode(), mode);
            }
          }
        }
      }
    }
  }
  // The separate pass exists everywhere: it is the last resort.
  force_alpha_mode(AlphaMode::separate);
  run_case({2, 8, 8, 8, false, false, 0.5f, true, true, DType::bf16, DType::bf16});
  EXPECT_EQ(last_matmul_alpha_mode(), AlphaMode::separate);
}

// Row ranges of every batch matrix (blockwise attention's per-block products):
// A rows [r0, r0+M) of [T, K] per batch, B = first N rows of [T, K] per batch
// (transposed), C rows [r0, r0+M) of [T, N] per batch; the rest of C untouched.
// The runtime alpha must not cost the fast implementation: oneDNN 2.6 drops
// from brgemm (AMX) to gemm:jit for runtime output scales, which is why alpha
// is a scalar post-op; a scaled product runs the same implementation as an
// unscaled one.
TEST(Matmul, ScaledProductKeepsTheUnscaledImplementation) {
  for (DType type : {DType::f32, DType::bf16}) {
    for (int64_t batch : {1, 3}) {
      run_case({batch, 128, 96, 64, false, false, 1.0f, true, false, type, type});
      const std::string unscaled = last_matmul_impl();
      run_case({batch, 128, 96, 64, false, false, 0.37f, true, false, type, type});
      EXPECT_EQ(std::string(last_matmul_impl()), unscaled) << dtype_name(type) << " batch " << batch;
    }
  }
}

TEST(Matmul, BatchStridesSelectRowRanges) {
  const int64_t batch = 3, T = 11, K = 8, M = 4, N = 7, r0 = 5;
  for (DType type : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(type));
    auto A = random_floats(static_cast<size_t>(batch * T * K), 21), B = random_floats(static_cast<size_t>(batch * T * K), 22);
    if (type == DType::bf16) {
      for (auto& x : A) x = test::round_to_bf16(x);
      for (auto& x : B) x = test::round_to_bf16(x);
    }
    auto A16 = to_bf16_bits(A), B16 = to_bf16_bits(B);
    std::vector<float> C(static_cast<size_t>(batch * T * N), -7.0f);
    const MatmulArgs args = MatmulArgs::product_bt(M, N, K)
                               .with_batch(batch)
                               .with_types(type, type)
                               .with_alpha(0.5f)
                               .with_batch_strides(T * K, T * K, T * N);
    const bool b16 = type == DType::bf16;
    const void* a_ptr = b16 ? static_cast<const void*>(A16.data() + r0 * K) : A.data() + r0 * K;
    const void* b_ptr = b16 ? static_cast<const void*>(B16.data()) : B.data();
    matmul(args, a_ptr, b_ptr, C.data() + r0 * N);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t j = 0; j < N; ++j) {
          const float got = C[static_cast<size_t>((b * T + t) * N + j)];
          if (t < r0 || t >= r0 + M) {
            ASSERT_EQ(got, -7.0f) << "wrote outside the row range at b=" << b << " t=" << t;
            continue;
          }
          double dot = 0.0, mag = 0.0;
          for (int64_t k = 0; k < K; ++k) {
            const double p = static_cast<double>(A[static_cast<size_t>((b * T + t) * K + k)]) *
                             B[static_cast<size_t>((b * T + j) * K + k)];
            dot += p;
            mag += std::abs(p);
          }
          ASSERT_NEAR(got, 0.5 * dot, 2.0 * (K + 2) * kEps32 * mag + 1e-7) << "b=" << b << " t=" << t << " j=" << j;
        }
      }
    }
  }
  MatmulArgs bad;
  bad.batch = 2;
  bad.M = bad.N = bad.K = 4;
  bad.a_batch_stride = 15;
  float x = 0;
  EXPECT_THROW(matmul(bad, &x, &x, &x), std::invalid_argument);
}

TEST(Matmul, Bf16InputsAccumulateInFp32) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      run_case({1, 64, 96, 256, ta, tb, 1.0f, false, false, DType::bf16, DType::bf16});
      run_case({2, 33, 17, 70, ta, tb, 0.5f, true, true, DType::bf16, DType::bf16});
    }
  }
}

TEST(Matmul, MixedOperandsRunAsBf16) {
  run_case({1, 40, 24, 64, false, true, 1.0f, false, true, DType::f32, DType::bf16});
  run_case({1, 40, 24, 64, true, false, 1.0f, true, false, DType::bf16, DType::f32});
}

TEST(Matmul, ModelShapes) {
  // The GPT reference model's inner and output widths (rows cut to keep the
  // float64 reference cheap).
  run_case({1, 48, 768, 256, false, true, 1.0f, false, true, DType::f32, DType::f32});
  run_case({1, 48, 256, 1024, false, false, 1.0f, true, false, DType::bf16, DType::bf16});
  run_case({1, 256, 64, 2048, true, false, 1.0f, true, false, DType::f32, DType::f32});
}

TEST(Matmul, EmptyInnerDimensionGivesBiasOrUnchanged) {
  std::vector<float> C = {1, 2, 3, 4, 5, 6};
  const std::vector<float> bias = {10, 20, 30};
  MatmulArgs args;
  args.M = 2;
  args.N = 3;
  args.K = 0;
  args.accumulate = true;
  matmul(args, nullptr, nullptr, C.data(), bias.data());
  EXPECT_EQ(C, (std::vector<float>{11, 22, 33, 14, 25, 36}));
  args.accumulate = false;
  matmul(args, nullptr, nullptr, C.data(), nullptr);
  EXPECT_EQ(C, std::vector<float>(6, 0.0f));
}

TEST(Matmul, RejectsBadShapesAndTypes) {
  MatmulArgs args;
  args.M = -1;
  args.N = 2;
  args.K = 2;
  float c = 0;
  EXPECT_THROW(matmul(args, &c, &c, &c), std::invalid_argument);
  args.M = 1;
  args.a_type = DType::e4m3fn;
  EXPECT_THROW(matmul(args, &c, &c, &c), std::invalid_argument);
  args.a_type = DType::f16;  // fp16 x bf16 has no common product type
  args.b_type = DType::bf16;
  EXPECT_THROW(matmul(args, &c, &c, &c), std::invalid_argument);
}

// fp16 operands (fp16-amp without fp16 hardware): widened exactly, products
// exact in fp32; beside an fp32 operand, that one is not rounded.
TEST(Matmul, Fp16OperandsMultiplyTheirExactValues) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [at, bt] : {std::pair{DType::f16, DType::f16}, {DType::f16, DType::f32}, {DType::f32, DType::f16}})
        run_case({2, 33, 47, 65, ta, tb, 0.75f, true, true, at, bt});
  EXPECT_NE(std::string(last_matmul_impl()).find("f16_widened:"), std::string::npos) << last_matmul_impl();
}

// x [M, K] times a constant weight W stored [N, K] (a linear layer).
std::vector<float> linear(const std::vector<float>& x, const std::vector<float>& w, int64_t M, int64_t N,
                          int64_t K, const void* key, int version, DType type) {
  const MatmulArgs args = MatmulArgs::product_bt(M, N, K).with_types(type, type).with_constant_b(key, version);
  std::vector<float> out(static_cast<size_t>(M * N));
  if (type == DType::bf16 || type == DType::f16) {
    auto x16 = type == DType::f16 ? to_f16_bits(x) : to_bf16_bits(x);
    auto w16 = type == DType::f16 ? to_f16_bits(w) : to_bf16_bits(w);
    matmul(args, x16.data(), w16.data(), out.data());
  } else {
    matmul(args, x.data(), w.data(), out.data());
  }
  return out;
}

std::vector<float> plain_linear(const std::vector<float>& x, const std::vector<float>& w, int64_t M,
                                int64_t N, int64_t K, DType type) {
  const MatmulArgs args = MatmulArgs::product_bt(M, N, K);
  std::vector<float> xr = x, wr = w, out(static_cast<size_t>(M * N));
  if (type == DType::bf16) {
    for (auto& v : xr) v = test::round_to_bf16(v);
    for (auto& v : wr) v = test::round_to_bf16(v);
  }
  if (type == DType::f16) {
    for (auto& v : xr) v = round_to_f16(v);
    for (auto& v : wr) v = round_to_f16(v);
  }
  matmul(args, xr.data(), wr.data(), out.data());
  return out;
}

void check_packed_cache(DType type) {
  const int64_t M = 64, N = 96, K = 128;
  clear_matmul_cache();
  auto x = random_floats(static_cast<size_t>(M * K), 11);
  auto w = random_floats(static_cast<size_t>(N * K), 12);
  auto w_new = random_floats(static_cast<size_t>(N * K), 13);
  const int key_object = 0;
  const void* key = &key_object;

  // Version 0: packed result agrees with the unpacked product to rounding.
  auto first = linear(x, w, M, N, K, key, 0, type);
  const std::string impl = last_matmul_impl();
  auto want_old = plain_linear(x, w, M, N, K, type);
  test::expect_near_all(first, test::to_double(want_old), 1e-5, 1e-5, "packed v0");
  EXPECT_NE(impl, "none");

  // Same key and version but different data: a packed copy, if one is kept,
  // must be reused (that is the contract: the caller bumps the version).
  auto stale = linear(x, w_new, M, N, K, key, 0, type);
  const bool packs = packed_operand_count() > 0;
  if (packs) {
    EXPECT_EQ(stale, first) << "packed copy was not reused for an unchanged version";
  }
  // New version: repacked from the new data.
  auto fresh = linear(x, w_new, M, N, K, key, 1, type);
  auto want_new = plain_linear(x, w_new, M, N, K, type);
  test::expect_near_all(fresh, test::to_double(want_new), 1e-5, 1e-5, "packed v1");
  // Forgetting the operand drops its packed copies.
  forget_packed_operand(key);
  EXPECT_EQ(packed_operand_count(), 0);
  auto again = linear(x, w, M, N, K, key, 1, type);
  test::expect_near_all(again, test::to_double(want_old), 1e-5, 1e-5, "after forget");
  std::printf("packed B %s: impl %s, packed copies kept: %s\n", dtype_name(type), impl.c_str(),
              packs ? "yes" : "no (plain layout preferred)");
}

TEST(Matmul, PackedWeightCacheFollowsVersion) {
  check_packed_cache(DType::f32);
  check_packed_cache(DType::bf16);
  check_packed_cache(DType::f16);
}

TEST(Matmul, ReportsImplementationAndCaches) {
  clear_matmul_cache();
  EXPECT_EQ(cached_matmul_primitives(), 0);
  run_case({1, 8, 8, 8, false, false, 1.0f, false, false, DType::f32, DType::f32});
  run_case({1, 8, 8, 8, false, false, 1.0f, false, false, DType::f32, DType::f32});
  EXPECT_EQ(cached_matmul_primitives(), 1);
  EXPECT_GT(std::strlen(last_matmul_impl()), 0u);
  // A new thread count gets its own primitive (oneDNN fixes the work split at creation).
  const int saved = num_threads();
  set_num_threads(saved == 1 ? 2 : 1);
  run_case({1, 8, 8, 8, false, false, 1.0f, false, false, DType::f32, DType::f32});
  set_num_threads(saved);
  EXPECT_EQ(cached_matmul_primitives(), 2);
}

}  // namespace
}  // namespace mantissa::kernels
