// Losses (cross-entropy with ignore index, squared error; sum reduction) and
// shape ops (reshape, transpose, split, concat).
#include <algorithm>
#include <stdexcept>
#include <utility>
#include <string>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/kernels/kernels.hpp"

namespace mantissa::autograd {

// ---- losses ------------------------------------------------------------------------------
// logits [N, V], targets [N] -> [1]; the fused kernel makes dlogits = softmax - onehot
// in the forward pass (only when recording), backward scales it by dL.
Var cross_entropy(Tape& t, const Var& logits, const Tensor& targets, LossStats* stats) {
  return scaled_cross_entropy(t, logits, targets, 1.0f, 1.0f, stats);
}

// As cross_entropy on z = input_scale x logits; the kernel writes grad_scale (softmax - onehot).
Var scaled_cross_entropy(Tape& t, const Var& logits, const Tensor& targets, float input_scale, float grad_scale,
                         LossStats* stats) {
  const int64_t V = logits.dim(-1), N = logits.numel() / V;
  if (targets.dtype() != DType::i32 || targets.numel() != N)
    throw std::invalid_argument("cross_entropy: targets must be i32 with one entry per row of logits " +
                                shape_str(logits.shape()) + ", got " + shape_str(targets.shape()));
  const int32_t* tg = targets.data<int32_t>();
  for (int64_t i = 0; i < N; ++i)
    if (tg[i] >= V)
      throw std::out_of_range("cross_entropy: target " + std::to_string(tg[i]) + " at row " + std::to_string(i) +
                              " is outside [0, " + std::to_string(V) + ")");
  Tensor z = logits.value;
  if (input_scale != 1.0f) {
    z = Tensor::empty(logits.shape(), DType::f32, MemoryKind::workspace);
    kernels::scale(z.f32(), logits.value.f32(), input_scale, z.numel());
  }
  const bool record = t.wants_grad({&logits});
  Tensor losses = Tensor::empty({N}, DType::f32, MemoryKind::workspace);
  Tensor dlogits = record ? Tensor::empty(logits.shape()) : Tensor();
  int64_t count = 0;
  const double sum = kernels::cross_entropy(z.f32(), tg, N, V, grad_scale, losses.f32(),
                                            record ? dlogits.f32() : nullptr, &count);
  if (stats) {
    stats->sum += sum;
    stats->count += count;
  }
  Var out = Tape::result(Tensor::from({static_cast<float>(sum)}, {1}), record);
  if (record)
    t.record([dlogits, ln = logits.node, on = out.node]() mutable {
      if (!on->has_grad()) return;
      const float dL = on->grad.f32()[0];
      if (dL != 1.0f) kernels::scale(dlogits.f32(), dlogits.f32(), dL, dlogits.numel());
      ln->accumulate(dlogits);
      dlogits = Tensor();
    });
  return out;
}

// sum (pred - target)^2 -> [1]; dpred += pred_grad_scale 2 dL (pred - target), dtarget -=
// target_grad_scale 2 dL (pred - target).
Var mse(Tape& t, const Var& pred, const Var& target, float pred_grad_scale, float target_grad_scale) {
  if (pred.shape() != target.shape())
    throw std::invalid_argument("mse: shapes differ: " + shape_str(pred.shape()) + " and " + shape_str(target.shape()));
  const int64_t n = pred.numel();
  Tensor diff = Tensor::empty(pred.shape());
  const float* p = pred.value.f32();
  const float* q = target.value.f32();
  float* d = diff.f32();
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    d[i] = p[i] - q[i];
    sum += static_cast<double>(d[i]) * d[i];
  }
  const bool record = t.wants_grad({&pred, &target});
  Var out = Tape::result(Tensor::from({static_cast<float>(sum)}, {1}), record);
  if (record)
    t.record([n, diff, bp = pred_grad_scale, bt = target_grad_scale, pn = pred.node, tn = target.node,
              on = out.node]() {
      if (!on->has_grad()) return;
      const float g = 2.0f * on->grad.f32()[0];
      if (pn) kernels::axpy(pn->buffer().f32(), diff.f32(), bp * g, n);
      if (tn) kernels::axpy(tn->buffer().f32(), diff.f32(), -bt * g, n);
    });
  return out;
}

// ---- shapes ------------------------------------------------------------------------------
Var reshape(Tape& t, const Var& x, const Shape& shape) {
  Var out = Tape::result(x.value.view(shape), t.wants_grad({&x}));
  out.param = nullptr;
  if (out.node)
    t.record([xn = x.node, on = out.node]() {
      if (on->has_grad()) xn->accumulate(on->grad.view(xn->shape));
    });
  return out;
}

namespace {
// out [batch, N, M] = in [batch, M, N]^T, or += when accumulate.
void transpose_last2(float* out, const float* in, int64_t batch, int64_t M, int64_t N, bool accumulate) {
#pragma omp parallel for schedule(static) if (batch * M * N > 65536)
  for (int64_t b = 0; b < batch; ++b) {
    const float* src = in + b * M * N;
    float* dst = out + b * M * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        if (accumulate) dst[j * M + i] += src[i * N + j];
        else dst[j * M + i] = src[i * N + j];
      }
  }
}
}  // namespace

Var transpose(Tape& t, const Var& x) {
  if (x.value.ndim() < 2) throw std::invalid_argument("transpose: needs at least 2 dims, got " + shape_str(x.shape()));
  const int64_t M = x.dim(-2), N = x.dim(-1), batch = x.numel() / (M * N > 0 ? M * N : 1);
  Shape shape = x.shape();
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  Tensor y = Tensor::empty(shape);
  transpose_last2(y.f32(), x.value.f32(), batch, M, N, false);
  const bool record = t.wants_grad({&x});
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([batch, M, N, xn = x.node, on = out.node]() {
      if (!on->has_grad()) return;
      bool has = false;
      Tensor& dx = xn->writable(&has);
      transpose_last2(dx.f32(), on->grad.f32(), batch, N, M, has);
    });
  return out;
}

namespace {
// Copy columns [c0, c0 + w) of rows of src [R, Cs] to dst [R, Cd] at column d0 (or add).
void copy_cols(float* dst, int64_t Cd, int64_t d0, const float* src, int64_t Cs, int64_t c0, int64_t R, int64_t w,
               bool accumulate) {
#pragma omp parallel for schedule(static) if (R * w > 65536)
  for (int64_t r = 0; r < R; ++r) {
    float* o = dst + r * Cd + d0;
    const float* s = src + r * Cs + c0;
    if (accumulate)
      for (int64_t c = 0; c < w; ++c) o[c] += s[c];
    else
      for (int64_t c = 0; c < w; ++c) o[c] = s[c];
  }
}
}  // namespace

std::vector<Var> split(Tape& t, const Var& x, const std::vector<int64_t>& sizes) {
  const int64_t C = x.dim(-1), R = x.numel() / (C > 0 ? C : 1);
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw std::invalid_argument("split: negative size");
    total += s;
  }
  if (total != C)
    throw std::invalid_argument("split: sizes add up to " + std::to_string(total) + " but the last dim of " +
                                shape_str(x.shape()) + " is " + std::to_string(C));
  const bool record = t.wants_grad({&x});
  std::vector<Var> outs;
  int64_t c0 = 0;
  for (int64_t w : sizes) {
    Shape shape = x.shape();
    shape.back() = w;
    Tensor y = Tensor::empty(shape);
    copy_cols(y.f32(), w, 0, x.value.f32(), C, c0, R, w, false);
    Var out = Tape::result(std::move(y), record);
    if (record)
      t.record([R, C, c0, w, xn = x.node, on = out.node]() {
        if (on->has_grad()) copy_cols(xn->buffer().f32(), C, c0, on->grad.f32(), w, 0, R, w, true);
      });
    outs.push_back(std::move(out));
    c0 += w;
  }
  return outs;
}

Var concat(Tape& t, const std::vector<Var>& xs) {
  if (xs.empty()) throw std::invalid_argument("concat: no inputs");
  Shape shape = xs[0].shape();
  int64_t C = 0;
  bool record = false;
  for (const Var& x : xs) {
    Shape s = x.shape();
    if (s.size() != shape.size() || !std::equal(s.begin(), s.end() - 1, shape.begin()))
      throw std::invalid_argument("concat: shape " + shape_str(s) + " does not match " + shape_str(shape) +
                                  " outside the last dim");
    C += s.back();
    record = record || t.wants_grad({&x});
  }
  shape.back() = C;
  Tensor y = Tensor::empty(shape);
  const int64_t R = y.numel() / (C > 0 ? C : 1);
  int64_t c0 = 0;
  std::vector<std::shared_ptr<GradNode>> nodes;
  std::vector<int64_t> offsets;
  for (const Var& x : xs) {
    const int64_t w = x.dim(-1);
    copy_cols(y.f32(), C, c0, x.value.f32(), w, 0, R, w, false);
    nodes.push_back(x.node);
    offsets.push_back(c0);
    c0 += w;
  }
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([R, C, nodes, offsets, on = out.node]() {
      if (!on->has_grad()) return;
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (!nodes[i]) continue;
        const int64_t w = nodes[i]->shape.back();
        copy_cols(nodes[i]->buffer().f32(), w, 0, on->grad.f32(), C, offsets[i], R, w, true);
      }
    });
  return out;
}

}  // namespace mantissa::autograd
