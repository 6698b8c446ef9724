#include "mantissa/cpu/profile.hpp"

#include <atomic>
#include <chrono>

namespace mantissa::cpu::profile {
namespace {
std::atomic<bool> g_enabled{false};
std::array<std::atomic<int64_t>, kCategories> g_ns{};
std::array<std::atomic<int64_t>, kCategories> g_calls{};
// flops in units of 1 (int64 holds 9e18: ample for a benchmark run)
std::atomic<int64_t> g_matmul_flops{0}, g_attention_flops{0};
thread_local int t_depth = 0;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

const char* category_name(Category c) {
  switch (c) {
    case Category::matmul: return "matmul";
    case Category::attention: return "attention";
    case Category::norms: return "norms";
    case Category::elementwise: return "elementwise";
    case Category::embedding: return "embedding";
    case Category::conversion: return "conversion";
    case Category::communication: return "communication";
    case Category::fp4_cast: return "fp4_cast";
    default: return "?";
  }
}

void enable(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

void reset() {
  for (auto& v : g_ns) v.store(0, std::memory_order_relaxed);
  for (auto& v : g_calls) v.store(0, std::memory_order_relaxed);
  g_matmul_flops.store(0, std::memory_order_relaxed);
  g_attention_flops.store(0, std::memory_order_relaxed);
}

Totals totals() {
  Totals t;
  for (int i = 0; i < kCategories; ++i) {
    t.seconds[static_cast<size_t>(i)] = static_cast<double>(g_ns[static_cast<size_t>(i)].load()) * 1e-9;
    t.calls[static_cast<size_t>(i)] = g_calls[static_cast<size_t>(i)].load();
  }
  t.matmul_flops = static_cast<double>(g_matmul_flops.load());
  t.attention_flops = static_cast<double>(g_attention_flops.load());
  return t;
}

Scope::Scope(Category c, double flops) : category_(c), flops_(flops) {
  if (!enabled()) return;
  entered_ = true;
  if (t_depth++ == 0) start_ns_ = now_ns();
}

Scope::~Scope() {
  if (entered_) --t_depth;
  if (start_ns_ < 0) return;
  const auto i = static_cast<size_t>(category_);
  g_ns[i].fetch_add(now_ns() - start_ns_, std::memory_order_relaxed);
  g_calls[i].fetch_add(1, std::memory_order_relaxed);
  if (category_ == Category::matmul) g_matmul_flops.fetch_add(static_cast<int64_t>(flops_), std::memory_order_relaxed);
  if (category_ == Category::attention) g_attention_flops.fetch_add(static_cast<int64_t>(flops_), std::memory_order_relaxed);
}

}  // namespace mantissa::cpu::profile
