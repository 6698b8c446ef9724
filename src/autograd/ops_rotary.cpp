// Rotary position embedding with grouped-query heads into the qkv layout.
#include "mantissa/autograd/ops_rotary.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/cpu/profile.hpp"

namespace mantissa::autograd {

namespace {
// cos/sin [T, D/2] of pos theta^(-2i/D), computed in double.
void rotary_table(std::vector<float>& cs, std::vector<float>& sn, int64_t T, int64_t D, double theta) {
  const int64_t half = D / 2;
  cs.resize(static_cast<size_t>(T * half));
  sn.resize(cs.size());
  for (int64_t p = 0; p < T; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(p) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      cs[static_cast<size_t>(p * half + i)] = static_cast<float>(std::cos(a));
      sn[static_cast<size_t>(p * half + i)] = static_cast<float>(std::sin(a));
    }
}

// out[i] = x[i] c - x[i+h] s, out[i+h] = x[i+h] c + x[i] s over one head;
// sign -1 applies the inverse rotation (the transpose), accumulating (+=).
void rotate(float* out, const float* x, const float* c, const float* s, int64_t half, float sign, bool add) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half], si = sign * s[i];
    const float ra = a * c[i] - b * si, rb = b * c[i] + a * si;
    out[i] = add ? out[i] + ra : ra;
    out[i + half] = add ? out[i + half] + rb : rb;
  }
}
}  // namespace

Var rotary_qkv(Tape& t, const Var& q, const Var& k, const Var& v, int64_t heads, int64_t kv_heads, double theta) {
  if (q.value.ndim() != 3) throw std::invalid_argument("rotary_qkv: q must be [B, T, H*D], got " + shape_str(q.shape()));
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0)
    throw std::invalid_argument("rotary_qkv: heads " + std::to_string(heads) + " is not a positive multiple of kv_heads " +
                                std::to_string(kv_heads));
  const int64_t B = q.dim(0), T = q.dim(1), C = q.dim(2), D = C / heads, KC = kv_heads * D, group = heads / kv_heads;
  if (C % heads != 0 || D % 2 != 0)
    throw std::invalid_argument("rotary_qkv: head size " + std::to_string(C) + "/" + std::to_string(heads) +
                                " must be an even integer");
  const Shape kv_shape{B, T, KC};
  if (k.shape() != kv_shape || v.shape() != kv_shape)
    throw std::invalid_argument("rotary_qkv: k " + shape_str(k.shape()) + " and v " + shape_str(v.shape()) +
                                " must be " + shape_str(kv_shape));
  std::vector<float> cs, sn;
  rotary_table(cs, sn, T, D, theta);
  const int64_t half = D / 2;
  Tensor y = Tensor::empty({B, T, 3 * C});
  {
    const cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
    const float* qv = q.value.f32();
    const float* kv = k.value.f32();
    const float* vv = v.value.f32();
    float* o = y.f32();
#pragma omp parallel for schedule(static)
    for (int64_t bt = 0; bt < B * T; ++bt) {
      const int64_t p = bt % T;
      const float* c = cs.data() + p * half;
      const float* s = sn.data() + p * half;
      float* row = o + bt * 3 * C;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t g = h / group;
        rotate(row + h * D, qv + bt * C + h * D, c, s, half, 1.0f, false);
        rotate(row + C + h * D, kv + bt * KC + g * D, c, s, half, 1.0f, false);
        for (int64_t d = 0; d < D; ++d) row[2 * C + h * D + d] = vv[bt * KC + g * D + d];
      }
    }
  }
  const bool record = t.wants_grad({&q, &k, &v});
  Var out = Tape::result(std::move(y), record);
  if (!record) return out;
  t.record([=, qn = q.node, kn = k.node, vn = v.node, on = out.node]() {
    if (!on->has_grad()) return;
    const cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
    const float* dy = on->grad.f32();
    float* dq = qn ? qn->buffer().f32() : nullptr;
    float* dk = kn ? kn->buffer().f32() : nullptr;
    float* dv = vn ? vn->buffer().f32() : nullptr;
#pragma omp parallel for schedule(static)
    for (int64_t bt = 0; bt < B * T; ++bt) {
      const int64_t p = bt % T;
      const float* c = cs.data() + p * half;
      const float* s = sn.data() + p * half;
      const float* row = dy + bt * 3 * C;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t g = h / group;
        if (dq) rotate(dq + bt * C + h * D, row + h * D, c, s, half, -1.0f, true);
        if (dk) rotate(dk + bt * KC + g * D, row + C + h * D, c, s, half, -1.0f, true);
        if (dv)
          for (int64_t d = 0; d < D; ++d) dv[bt * KC + g * D + d] += row[2 * C + h * D + d];
      }
    }
  });
  return out;
}

}  // namespace mantissa::autograd
