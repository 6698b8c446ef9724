// The tensor allocator's block cache (src/tensor/memory.cpp): freed blocks are
// reused for the same size, live-tensor accounting stays exact, and the cache
// can be released. Under AddressSanitizer the cache is off by design.
#include <gtest/gtest.h>

#include "mantissa/tensor/memory.hpp"
#include "mantissa/tensor/tensor.hpp"

namespace mantissa {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCacheOn = false;
#else
constexpr bool kCacheOn = true;
#endif

TEST(Arena, ReusesFreedBlocksAndCountsLiveBytesOnly) {
  release_cached_memory();
  const size_t before = memory_stats().of(MemoryKind::workspace);
  const void* first = nullptr;
  {
    Tensor a = Tensor::empty({1000, 37}, DType::f32, MemoryKind::workspace);
    first = a.raw();
    EXPECT_EQ(memory_stats().of(MemoryKind::workspace), before + 1000 * 37 * 4);
  }
  EXPECT_EQ(memory_stats().of(MemoryKind::workspace), before);
  EXPECT_EQ(cached_memory_bytes() > 0, kCacheOn);
  {
    // Same byte count, other shape and kind: the cached block comes back.
    Tensor b = Tensor::empty({37, 1000}, DType::f32, MemoryKind::activation);
    if (kCacheOn) {
      EXPECT_EQ(b.raw(), first);
    }
    EXPECT_EQ(cached_memory_bytes(), size_t{0});
    b.fill(3.0f);  // the whole block is writable
    EXPECT_EQ(b.f32()[37 * 1000 - 1], 3.0f);
  }
  release_cached_memory();
  EXPECT_EQ(cached_memory_bytes(), size_t{0});
  EXPECT_EQ(memory_stats().of(MemoryKind::workspace), before);
}

TEST(Arena, DifferentSizesDoNotShareBlocks) {
  release_cached_memory();
  const void* first = nullptr;
  {
    Tensor a = Tensor::empty({4096}, DType::f32, MemoryKind::workspace);
    first = a.raw();
  }
  Tensor keep = Tensor::empty({4096}, DType::f32, MemoryKind::workspace);  // takes the cached block
  Tensor c = Tensor::empty({8192}, DType::f32, MemoryKind::workspace);     // a new one
  EXPECT_NE(c.raw(), keep.raw());
  if (kCacheOn) {
    EXPECT_EQ(keep.raw(), first);
  }
}

}  // namespace
}  // namespace mantissa
