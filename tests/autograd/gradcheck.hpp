// Gradient checking against float64 references: an op's fp32 forward is
// compared with a float64 re-implementation, and its fp32 backward (a
// vector-Jacobian product with a random cotangent R) with central finite
// differences of <R, reference(x)> computed entirely in float64.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "mantissa/autograd/ops.hpp"

namespace gradcheck {

using Vec = std::vector<double>;
using mantissa::Shape;
using mantissa::Tensor;
namespace ag = mantissa::autograd;

struct Input {
  Shape shape;
  Vec values;
  bool requires_grad = true;
};

inline Vec random_vec(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 g(seed);
  Vec v(n);
  for (auto& x : v) x = lo + (hi - lo) * (static_cast<double>(g() >> 11) * 0x1.0p-53);
  return v;
}

inline Tensor to_tensor(const Shape& shape, const Vec& v) {
  std::vector<float> f(v.begin(), v.end());
  return Tensor::from(f, shape);
}

// Relative-to-scale closeness: |a - b| <= tol * max(1, max |reference|).
inline void expect_close(const std::vector<float>& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * scale) << what << " at element " << i;
}

using Reference = std::function<Vec(const std::vector<Vec>&)>;
using Op = std::function<ag::Var(ag::Tape&, std::vector<ag::Var>&)>;

// Runs op on fp32 copies of the inputs, checks the forward against ref, then
// every input gradient against float64 central differences of <R, ref>.
inline void check(const std::string& name, std::vector<Input> inputs, const Reference& ref, const Op& op,
                  double fwd_tol = 1e-5, double grad_tol = 1e-4, double h = 1e-6) {
  SCOPED_TRACE(name);
  ag::Tape tape;
  std::vector<ag::Var> vars;
  std::vector<Vec> values;
  for (const Input& in : inputs) {
    vars.push_back(tape.leaf(to_tensor(in.shape, in.values), in.requires_grad));
    values.push_back(in.values);
  }
  ag::Var out = op(tape, vars);
  const Vec want = ref(values);
  expect_close(out.value.to_vector(), want, fwd_tol, name + " forward");

  const Vec R = random_vec(want.size(), 1234);
  tape.backward(out, to_tensor(out.shape(), R));
  auto objective = [&](const std::vector<Vec>& v) {
    Vec y = ref(v);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += R[i] * y[i];
    return s;
  };
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].requires_grad) continue;
    ASSERT_TRUE(vars[k].node->has_grad()) << name << ": no gradient reached input " << k;
    const std::vector<float> got = vars[k].node->grad.to_vector();
    Vec fd(values[k].size());
    for (size_t i = 0; i < values[k].size(); ++i) {
      std::vector<Vec> plus = values, minus = values;
      plus[k][i] += h;
      minus[k][i] -= h;
      fd[i] = (objective(plus) - objective(minus)) / (2 * h);
    }
    expect_close(got, fd, grad_tol, name + " gradient of input " + std::to_string(k));
  }
}

}  // namespace gradcheck
