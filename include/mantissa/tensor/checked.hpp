// Checked arithmetic for sizes that come from outside (files, flags,
// configs): products and sums that throw std::invalid_argument naming what
// overflowed instead of wrapping into a small allocation that later code
// writes past.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace mantissa {

namespace detail {
// a op b for non-negative a, b through a __builtin_*_overflow function.
template <class Op>
int64_t checked_op(int64_t a, int64_t b, const char* what, const char* sign, Op op) {
  int64_t r;
  if (a < 0 || b < 0 || op(a, b, &r))
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(a) + sign + std::to_string(b) +
                                (a < 0 || b < 0 ? " has a negative operand" : " overflows 64 bits"));
  return r;
}
}  // namespace detail

// a * b for non-negative a, b; throws if either is negative or the product
// does not fit in int64_t.
inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  return detail::checked_op(a, b, what, " x ", [](int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); });
}

// a + b, likewise.
inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  return detail::checked_op(a, b, what, " + ", [](int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); });
}

// Product of non-negative factors (a shape's element count), checked.
template <class Range>
int64_t checked_numel(const Range& factors, const char* what) {
  int64_t n = 1;
  for (int64_t d : factors) n = checked_mul(n, d, what);
  return n;
}

}  // namespace mantissa
