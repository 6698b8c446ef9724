// Per-category time accounting of the kernels, for the benchmark harness's
// step breakdown (bench/bench_train.cpp). Off by default: a disabled Scope
// costs one relaxed atomic load. Only the outermost Scope on a thread counts,
// so a matmul issued inside attention is charged to attention, not twice.
#pragma once

#include <array>
#include <cstdint>

namespace mantissa::cpu::profile {

// fp4_cast: the FP4 recipes' block casts, their Hadamard rotations and the
// decodes of packed saved operands.
enum class Category : int { matmul, attention, norms, elementwise, embedding, conversion, communication, fp4_cast, count };
inline constexpr int kCategories = static_cast<int>(Category::count);
const char* category_name(Category c);

struct Totals {
  std::array<double, kCategories> seconds{};
  std::array<int64_t, kCategories> calls{};
  double matmul_flops = 0;     // 2 M N K batch of every top-level matmul call
  double attention_flops = 0;  // the four (forward) or five (backward) products inside attention
};

void enable(bool on);
bool enabled();
void reset();
Totals totals();

// Charges the wall time between construction and destruction to `c` (when
// enabled and outermost on this thread); flops go to the category's counter.
class Scope {
 public:
  explicit Scope(Category c, double flops = 0);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  int64_t start_ns_ = -1;  // -1: not counting
  bool entered_ = false;   // this Scope raised the thread's nesting depth
  Category category_;
  double flops_;
};

}  // namespace mantissa::cpu::profile
