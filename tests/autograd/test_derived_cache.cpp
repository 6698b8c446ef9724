// The one cache of values derived from a parameter (tensor/derived_cache.hpp)
// and its users' lifetimes: a value is derived again when the version moves,
// forgetting a source frees what was derived from it and from those values,
// forgetting an owner frees its entries only; the bytes a model's casts and
// a quantiser's weight casts hold come back to the allocator (counted
// workspace bytes, exact) when their owner or their parameter goes.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "mantissa/autograd/parameter.hpp"
#include "mantissa/autograd/tape.hpp"
#include "mantissa/kernels/matmul.hpp"
#include "mantissa/quant/fp8.hpp"
#include "mantissa/tensor/derived_cache.hpp"
#include "mantissa/tensor/memory.hpp"
#include "random_tensor.hpp"

using namespace mantissa;

namespace {

size_t workspace_bytes() { return memory_stats().of(MemoryKind::workspace); }

const DerivedCache::Kind kDoubled{"test: doubled"};
const DerivedCache::Kind kDerivedTwice{"test: derived from a derived value"};

autograd::Parameter make_param(int64_t K, int64_t N, uint64_t seed) {
  autograd::Parameter p{std::string("w"), Tensor(), Tensor()};
  p.value = random_tensor({K, N}, seed, 0.5f, MemoryKind::parameter);
  return p;
}

}  // namespace

TEST(DerivedCache, RefreshesPerVersionAndForgetsBySourceOwnerAndValue) {
  DerivedCache& cache = derived_cache();
  int source = 0, other = 0, owner_a = 0, owner_b = 0;
  auto& a = cache.slot<Tensor>(&source, &owner_a, kDoubled);
  EXPECT_EQ(a.version, -1);
  a.value = Tensor::zeros({8}, DType::f32, MemoryKind::workspace);
  a.version = 3;
  // The same key finds the same slot; another owner or source has its own.
  EXPECT_EQ(&cache.slot<Tensor>(&source, &owner_a, kDoubled), &a);
  auto& b = cache.slot<Tensor>(&source, &owner_b, kDoubled);
  EXPECT_NE(&b, &a);
  b.value = Tensor::zeros({4}, DType::f32, MemoryKind::workspace);
  auto& c = cache.slot<Tensor>(&other, &owner_a, kDoubled);
  c.value = Tensor::zeros({2}, DType::f32, MemoryKind::workspace);
  // A value derived from a's value (as a GEMM packs a quantiser's decode).
  auto& d = cache.slot<Tensor>(&a.value, &owner_b, kDerivedTwice);
  d.value = Tensor::zeros({1}, DType::f32, MemoryKind::workspace);
  EXPECT_EQ(cache.bytes(&owner_a), (8 + 2) * 4u);
  EXPECT_EQ(cache.bytes(&owner_b), (4 + 1) * 4u);
  EXPECT_EQ(cache.count(kDoubled), 3);
  EXPECT_EQ(cache.count(kDerivedTwice), 1);

  const size_t before = workspace_bytes();
  cache.forget_source(&source);  // a, b and (through a) d
  EXPECT_EQ(before - workspace_bytes(), (8 + 4 + 1) * 4u);
  EXPECT_EQ(cache.count(kDoubled), 1);
  EXPECT_EQ(cache.count(kDerivedTwice), 0);
  EXPECT_EQ(cache.slot<Tensor>(&source, &owner_a, kDoubled).version, -1);  // a new, empty slot
  cache.forget_owner(&owner_a);
  EXPECT_EQ(cache.count(kDoubled), 0);
  EXPECT_EQ(cache.bytes(&owner_a), 0u);
  EXPECT_EQ(before - workspace_bytes(), (8 + 4 + 1 + 2) * 4u);
}

TEST(DerivedCache, CastCacheFreesItsCastsWithItOrWithTheParameter) {
  const int64_t K = 32, N = 16;
  autograd::Parameter w = make_param(K, N, 1), v = make_param(K, N, 2);
  const size_t base = workspace_bytes();
  {
    autograd::CastCache casts;
    casts.get(w, DType::bf16);
    casts.get(v, DType::f16);
    EXPECT_EQ(casts.bytes(), static_cast<size_t>(2 * K * N * 2));
    EXPECT_EQ(workspace_bytes() - base, static_cast<size_t>(2 * K * N * 2));
    derived_cache().forget_source(&w);  // w dies: its cast goes, v's stays
    EXPECT_EQ(casts.bytes(), static_cast<size_t>(K * N * 2));
    EXPECT_EQ(workspace_bytes() - base, static_cast<size_t>(K * N * 2));
  }
  EXPECT_EQ(workspace_bytes(), base);
  derived_cache().forget_source(&v);
}

// An FP8 weight cast (codes K x N bytes + bf16 decode K x N x 2 bytes) and the
// GEMM's packed copy of its decode: the quantiser's end frees both.
TEST(DerivedCache, QuantiserFreesItsWeightCastsAndTheirPackedCopies) {
  const int64_t M = 8, K = 64, N = 32;
  autograd::Parameter w = make_param(K, N, 3);
  const size_t base = workspace_bytes();
  const int64_t packed_before = kernels::packed_operand_count();
  bool packs = false;
  {
    quant::Fp8Config c;
    c.forward_format = mantissa::formats::parse_format("e4m3fn");
    quant::Fp8Quantiser q(c);
    autograd::QuantSite site;
    site.key = &w;
    site.role = autograd::OperandRole::weight;
    autograd::OperandQuantiser::Weight cast = q.quantise_weight(w, 1, site);
    ASSERT_EQ(cast.decoded.dtype(), DType::bf16);
    EXPECT_EQ(workspace_bytes() - base, static_cast<size_t>(K * N + K * N * 2));
    // The same version: the cached cast, no new one.
    EXPECT_EQ(q.quantise_weight(w, 1, site).decoded.raw(), cast.decoded.raw());
    EXPECT_EQ(q.stats().weight_casts, 1);
    std::vector<uint16_t> x(static_cast<size_t>(M * K), 0x3f80);  // bf16 ones
    std::vector<float> y(static_cast<size_t>(M * N));
    const kernels::MatmulArgs args = kernels::MatmulArgs::product(M, N, K)
                                         .with_types(DType::bf16, DType::bf16)
                                         .with_constant_b(cast.cache_key, cast.cache_version);
    kernels::matmul(args, x.data(), cast.decoded.raw(), y.data());
    packs = kernels::packed_operand_count() > packed_before;  // oneDNN may prefer the plain layout
    // A new version casts again into the same entry (once the caller lets go of the old cast).
    cast = {};
    ++w.version;
    q.quantise_weight(w, 1, site);
    EXPECT_EQ(q.stats().weight_casts, 2);
    EXPECT_EQ(workspace_bytes() - base, static_cast<size_t>(K * N + K * N * 2));
  }
  EXPECT_EQ(workspace_bytes(), base);
  EXPECT_EQ(kernels::packed_operand_count(), packed_before);
  std::printf("packed copy of the decode kept: %s\n", packs ? "yes" : "no (plain layout preferred)");
}
