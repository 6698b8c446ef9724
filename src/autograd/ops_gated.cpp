// Gated feed-forward ops: SwiGLU and the per-channel scale.
#include "mantissa/autograd/ops_gated.hpp"

#include <stdexcept>
#include <string>

#include "mantissa/kernels/kernels.hpp"

namespace mantissa::autograd {

// ---- SwiGLU -----------------------------------------------------------------------------
// gate, up [N, F] -> y [N, F]; saves gate and up (policy's compact format).
Var swiglu(Tape& t, const Var& gate, const Var& up, float alpha, float beta) {
  if (gate.shape() != up.shape())
    throw std::invalid_argument("swiglu: gate " + shape_str(gate.shape()) + " and up " + shape_str(up.shape()) +
                                " differ in shape");
  const int64_t n = gate.numel();
  Tensor y = Tensor::empty(gate.shape());
  kernels::swiglu_forward(y.f32(), gate.value.f32(), up.value.f32(), n, alpha);
  const bool record = t.wants_grad({&gate, &up});
  Var out = Tape::result(std::move(y), record);
  if (!record) return out;
  t.record([=, gs = t.save_compact(gate.value), us = t.save_compact(up.value), gn = gate.node, un = up.node,
            on = out.node]() {
    if (!on->has_grad()) return;
    float* dg = gn ? gn->buffer().f32() : nullptr;
    float* du = un ? un->buffer().f32() : nullptr;
    if (gs.dtype() == DType::bf16 && us.dtype() == DType::bf16) {  // widened block by block, no fp32 copies
      kernels::swiglu_backward_bf16x(dg, du, gs.data<uint16_t>(), us.data<uint16_t>(), on->grad.f32(), n, alpha, beta);
      return;
    }
    const Tensor g32 = Tape::restore(gs), u32 = Tape::restore(us);
    kernels::swiglu_backward(dg, du, g32.f32(), u32.f32(), on->grad.f32(), n, alpha, beta);
  });
  return out;
}

// ---- per-channel scale ------------------------------------------------------------------
Var scale_channels(Tape& t, const Var& x, const Tensor& s) {
  const int64_t C = x.dim(-1), N = x.numel() / C;
  if (s.dtype() != DType::f32 || s.shape() != Shape{C})
    throw std::invalid_argument("scale_channels: scales " + shape_str(s.shape()) + " do not match input " +
                                shape_str(x.shape()));
  Tensor y = Tensor::empty(x.shape());
  {
    const float* xv = x.value.f32();
    const float* sv = s.f32();
    float* o = y.f32();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < C; ++c) o[i * C + c] = xv[i * C + c] * sv[c];
  }
  const bool record = t.wants_grad({&x});
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([=, xn = x.node, on = out.node]() {
      if (!on->has_grad()) return;
      const float* dy = on->grad.f32();
      const float* sv = s.f32();
      float* dx = xn->buffer().f32();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < C; ++c) dx[i * C + c] += dy[i * C + c] * sv[c];
    });
  return out;
}

}  // namespace mantissa::autograd
