// Row-wise ops (softmax, layer norm), causal self-attention and embeddings.
// Statistics are fp32 whatever the policy; only the large saved activations
// (inputs, attention probabilities) follow policy.saved.
#include <stdexcept>
#include <string>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/kernels/kernels.hpp"

namespace mantissa::autograd {
namespace {
// Gradient buffer of a node, or scratch when no gradient is wanted there
// (the fused kernels always write every output).
Tensor grad_or_scratch(const std::shared_ptr<GradNode>& n, const Shape& shape) {
  return n ? n->buffer() : Tensor::zeros(shape, DType::f32, MemoryKind::workspace);
}

void check_ids(const Tensor& ids, int64_t V, const char* op) {
  if (ids.dtype() != DType::i32) throw std::invalid_argument(std::string(op) + ": ids must be i32");
  const int32_t* p = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    if (p[i] < 0 || p[i] >= V)
      throw std::out_of_range(std::string(op) + ": id " + std::to_string(p[i]) + " at position " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(V) + ")");
}
}  // namespace

// y [N, C] = softmax over the last dim of x; dx += y * (dy - sum(dy * y)).
Var softmax(Tape& t, const Var& x) {
  const int64_t C = x.dim(-1), N = x.numel() / C;
  Tensor y = Tensor::empty(x.shape());
  kernels::softmax_forward(y.f32(), x.value.f32(), N, C);
  const bool record = t.wants_grad({&x});
  Var out = Tape::result(y, record);
  if (record)
    t.record([N, C, saved = t.save_compact(y), xn = x.node, on = out.node]() {
      if (!on->has_grad()) return;
      kernels::softmax_backward(xn->buffer().f32(), Tape::restore(saved).f32(), on->grad.f32(), N, C);
    });
  return out;
}

// x [N, C], weight/bias [C] -> out [N, C]; mean, rstd [N] kept in fp32.
Var layer_norm(Tape& t, const Var& x, const Var& weight, const Var& bias, float eps) {
  return scaled_layer_norm(t, x, weight, bias, 1.0f, 1.0f, 1.0f, 1.0f, eps);
}

namespace {
// alpha v as a [C] workspace tensor (v itself when alpha is 1).
Tensor scaled_vector(const Tensor& v, float alpha) {
  if (alpha == 1.0f) return v;
  Tensor s = Tensor::empty(v.shape(), DType::f32, MemoryKind::workspace);
  kernels::scale(s.f32(), v.f32(), alpha, v.numel());
  return s;
}
}  // namespace

// fwd (xhat w + b) = xhat (fwd w) + fwd b; dx is linear in the weight the
// kernel reads, so dx x input = kernel dx with weight input x w.
Var scaled_layer_norm(Tape& t, const Var& x, const Var& weight, const Var& bias, float forward, float input,
                      float weight_scale, float bias_scale, float eps) {
  const int64_t C = x.dim(-1), N = x.numel() / C;
  if (weight.shape() != Shape{C} || bias.shape() != Shape{C})
    throw std::invalid_argument("layer_norm: weight " + shape_str(weight.shape()) + " / bias " +
                                shape_str(bias.shape()) + " do not match input " + shape_str(x.shape()));
  Tensor y = Tensor::empty(x.shape());
  Tensor mean = Tensor::empty({N}), rstd = Tensor::empty({N});
  kernels::layernorm_forward(y.f32(), mean.f32(), rstd.f32(), x.value.f32(), scaled_vector(weight.value, forward).f32(),
                             scaled_vector(bias.value, forward).f32(), N, C, eps);
  const bool record = t.wants_grad({&x, &weight, &bias});
  Var out = Tape::result(std::move(y), record);
  if (!record) return out;
  Tensor xs;
  if (dtype_size(t.policy().saved) == 1) {
    // 1-byte saves keep x - mean (the backward kernel then gets mean 0): the
    // per-tensor scale follows the rows' spread, not an offset they share.
    xs = t.save_centered(x.value, mean);
    mean = Tensor::zeros({N});
  } else {
    xs = t.save_compact(x.value);
  }
  t.record([N, C, xs, w = weight.value, mean, rstd, input, weight_scale, bias_scale, xn = x.node, wn = weight.node,
            bn = bias.node, on = out.node]() {
    if (!on->has_grad()) return;
    // Scaled weight / bias gradients go through [C] scratch, added scaled.
    const auto grad_or_scaled = [C](const std::shared_ptr<GradNode>& n, float alpha) {
      return n && alpha == 1.0f ? n->buffer() : Tensor::zeros({C}, DType::f32, MemoryKind::workspace);
    };
    Tensor dx = grad_or_scratch(xn, xn ? xn->shape : Shape{N, C});
    Tensor dw = grad_or_scaled(wn, weight_scale), db = grad_or_scaled(bn, bias_scale);
    const Tensor wx = scaled_vector(w, input);
    if (dtype_size(xs.dtype()) == 1)  // decoded row by row, no restored copy
      kernels::layernorm_backward_codes(dx.f32(), dw.f32(), db.f32(), on->grad.f32(), xs.data<uint8_t>(),
                                        Tape::decode_table(xs.dtype()), xs.scale(), wx.f32(), mean.f32(), rstd.f32(),
                                        N, C);
    else if (xs.dtype() == DType::bf16)  // widened row by row, no fp32 copy
      kernels::layernorm_backward_bf16x(dx.f32(), dw.f32(), db.f32(), on->grad.f32(),
                                        xs.data<uint16_t>(), wx.f32(), mean.f32(), rstd.f32(),
                                        N, C);
    else
      kernels::layernorm_backward(dx.f32(), dw.f32(), db.f32(), on->grad.f32(), Tape::restore(xs).f32(), wx.f32(),
                                  mean.f32(), rstd.f32(), N, C);
    if (wn && weight_scale != 1.0f) wn->accumulate_scaled(dw, weight_scale);
    if (bn && bias_scale != 1.0f) bn->accumulate_scaled(db, bias_scale);
  });
  return out;
}

// qkv [B, T, 3C] -> out [B, T, C]; probabilities att [B, NH, T, T] kept for backward
// (or, from kernels::attention_prefers_blockwise, only their row log-sum-exp).
Var causal_self_attention(Tape& t, const Var& qkv, int64_t heads) {
  if (qkv.value.ndim() != 3 || qkv.dim(2) % 3 != 0)
    throw std::invalid_argument("causal_self_attention: qkv must be [B, T, 3C], got " + shape_str(qkv.shape()));
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  if (heads <= 0 || C % heads != 0)
    throw std::invalid_argument("causal_self_attention: " + std::to_string(C) + " channels do not split into " +
                                std::to_string(heads) + " heads");
  Tensor y = Tensor::empty({B, T, C});
  // Under a bf16 matmul policy the four products per pass run on AMX too.
  const bool bf16 = t.policy().matmul == DType::bf16;
  if (kernels::attention_prefers_blockwise(B, T, heads, bf16)) {
    // Long sequences: blockwise kernels keep only the per-row log-sum-exp
    // [B, NH, T] instead of the T x T probabilities; backward recomputes them.
    Tensor lse = Tensor::empty({B, heads, T}, DType::f32, MemoryKind::activation);
    kernels::attention_forward_blockwise(y.f32(), lse.f32(), qkv.value.f32(), B, T, C, heads, bf16);
    const bool record = t.wants_grad({&qkv});
    Var out = Tape::result(std::move(y), record);
    if (record)
      t.record([=, qs = t.save_compact(qkv.value), qn = qkv.node, on = out.node]() {
        if (!on->has_grad()) return;
        kernels::attention_backward_blockwise(qn->buffer().f32(), on->grad.f32(), Tape::restore(qs).f32(), lse.f32(),
                                              B, T, C, heads, bf16);
      });
    return out;
  }
  const DType saved = t.policy().saved;
  if (bf16 && (saved == DType::bf16 || dtype_size(saved) == 1)) {
    // The probabilities are made once in bf16: operand of P V and, in bf16
    // or re-encoded to the 1-byte saved format, what backward keeps.
    Tensor att16 = Tensor::empty({B, heads, T, T}, DType::bf16, MemoryKind::activation);
    kernels::attention_forward_bf16(y.f32(), att16.data<uint16_t>(), qkv.value.f32(), B, T, C, heads);
    const bool record = t.wants_grad({&qkv});
    Var out = Tape::result(std::move(y), record);
    if (record)
      t.record([=, qs = t.save_compact(qkv.value), as = t.save_compact(att16), qn = qkv.node, on = out.node]() {
        if (!on->has_grad()) return;
        Tensor datt = Tensor::empty({B, heads, T, T}, DType::f32, MemoryKind::workspace);
        kernels::attention_backward_bf16(qn->buffer().f32(), datt.f32(), on->grad.f32(), Tape::restore(qs).f32(),
                                         Tape::restore_bf16(as).data<uint16_t>(), B, T, C, heads);
      });
    return out;
  }
  Tensor att = Tensor::empty({B, heads, T, T});
  kernels::attention_forward(y.f32(), att.f32(), qkv.value.f32(), B, T, C, heads, bf16);
  const bool record = t.wants_grad({&qkv});
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([=, qs = t.save_compact(qkv.value), as = t.save_compact(att), qn = qkv.node, on = out.node]() {
      if (!on->has_grad()) return;
      Tensor datt = Tensor::empty({B, heads, T, T}, DType::f32, MemoryKind::workspace);
      kernels::attention_backward(qn->buffer().f32(), datt.f32(), on->grad.f32(), Tape::restore(qs).f32(),
                                  Tape::restore(as).f32(), B, T, C, heads, bf16);
    });
  return out;
}

// out [..., C] = weight [V, C] rows; dweight[id] += dout row (serial: ids repeat).
Var embedding(Tape& t, const Tensor& ids, const Var& weight) {
  if (weight.value.ndim() != 2) throw std::invalid_argument("embedding: weight must be [V, C], got " + shape_str(weight.shape()));
  const int64_t V = weight.dim(0), C = weight.dim(1), N = ids.numel();
  check_ids(ids, V, "embedding");
  Shape shape = ids.shape();
  shape.push_back(C);
  Tensor y = Tensor::empty(shape);
  const int32_t* id = ids.data<int32_t>();
  const float* w = weight.value.f32();
  float* o = y.f32();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) o[i * C + c] = w[id[i] * C + c];
  const bool record = t.wants_grad({&weight});
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([N, C, ids, wn = weight.node, on = out.node]() {
      if (!on->has_grad()) return;
      float* dw = wn->buffer().f32();
      const float* dout = on->grad.f32();
      const int32_t* idp = ids.data<int32_t>();
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < C; ++c) dw[idp[i] * C + c] += dout[i * C + c];
    });
  return out;
}

// ids [B, T] -> out [B, T, C] = wte[ids] + wpe[0..T).
Var token_position_embedding(Tape& t, const Tensor& ids, const Var& wte, const Var& wpe) {
  if (ids.ndim() != 2) throw std::invalid_argument("token_position_embedding: ids must be [B, T], got " + shape_str(ids.shape()));
  const int64_t B = ids.dim(0), T = ids.dim(1), C = wte.dim(1);
  if (wpe.value.ndim() != 2 || wpe.dim(1) != C)
    throw std::invalid_argument("token_position_embedding: wpe " + shape_str(wpe.shape()) + " does not match wte " +
                                shape_str(wte.shape()));
  if (T > wpe.dim(0))
    throw std::invalid_argument("token_position_embedding: sequence length " + std::to_string(T) +
                                " exceeds the context of " + std::to_string(wpe.dim(0)) + " positions");
  check_ids(ids, wte.dim(0), "token_position_embedding");
  Tensor y = Tensor::empty({B, T, C});
  kernels::embedding_forward(y.f32(), ids.data<int32_t>(), wte.value.f32(), wpe.value.f32(), B, T, C);
  const bool record = t.wants_grad({&wte, &wpe});
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([B, T, C, ids, en = wte.node, pn = wpe.node, on = out.node]() {
      if (!on->has_grad()) return;
      kernels::embedding_backward(en ? en->buffer().f32() : nullptr, pn ? pn->buffer().f32() : nullptr,
                                  on->grad.f32(), ids.data<int32_t>(), B, T, C);
    });
  return out;
}

}  // namespace mantissa::autograd
