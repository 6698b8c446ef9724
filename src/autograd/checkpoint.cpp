// Activation checkpointing: trade one extra forward of a segment for not
// keeping its activations.
#include "mantissa/autograd/ops.hpp"

namespace mantissa::autograd {

Var checkpoint(Tape& t, const Var& x, const Segment& fn) {
  const OpContext entry = t.ctx();  // replayed by the recomputation
  Tensor y;
  {
    NoGrad no_grad;
    Tape inner(entry);
    y = fn(inner, t.constant(x.value)).value;
    t.ctx().dropout_calls = inner.ctx().dropout_calls;
  t.ctx().quant_calls = inner.ctx().quant_calls;  // FP8 sites of parameter-free products keep their call order
  }
  // Parameters inside fn may need gradients even when x does not.
  const bool record = grad_enabled();
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([entry, fn, xs = x.value, xn = x.node, on = out.node]() {
      if (!on->has_grad()) return;
      Tape inner(entry);
      Var xin = inner.leaf(xs, xn != nullptr);
      Var yy = fn(inner, xin);
      if (!yy.node) return;  // nothing inside needs a gradient
      inner.backward(yy, on->grad);
      if (xn && xin.node->has_grad()) xn->accumulate(xin.node->grad);
    });
  return out;
}

}  // namespace mantissa::autograd
