"""mantissa.torch (a recipe's casts on nn.Linear) against the same casts done by
hand with ml_dtypes, and DLPack round trips with PyTorch tensors."""

import copy
import math

import ml_dtypes
import numpy as np
import pytest

import mantissa

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mantissa.torch as mt  # noqa: E402

FP8 = {"e4m3fn": (ml_dtypes.float8_e4m3fn, 448.0), "e5m2": (ml_dtypes.float8_e5m2, 57344.0)}


def to_np(t):
    return np.from_dlpack(t.detach().contiguous())


def to_torch(a):
    if not (a.flags.writeable and a.flags.c_contiguous):  # numpy exports only writable arrays to DLPack 0.x
        a = np.array(a, order="C")
    return torch.utils.dlpack.from_dlpack(a.__dlpack__())


def hand_exponent(fmax, amax, margin=0):
    k = 0
    while amax * 2.0 ** (k + 1) <= fmax:
        k += 1
    while amax * 2.0 ** k > fmax:
        k -= 1
    return margin - k


def hand_cast(a, fmt, e):
    """Per-tensor cast by hand: scale by 2^-e, saturate, round with ml_dtypes, scale back."""
    dt, fmax = FP8[fmt]
    s = np.clip(a.astype(np.float64) * 2.0 ** -e, -fmax, fmax)
    return (s.astype(dt).astype(np.float64) * 2.0 ** e).astype(np.float32)


def hand_mx(a, fmt, block=32):
    """MX with ceil scales by hand: E the smallest with amax x 2^-E <= max, per block of the last axis."""
    dt, fmax = FP8[fmt]
    rows = a.reshape(-1, a.shape[-1]).astype(np.float64)
    out = np.empty_like(rows)
    for b0 in range(0, rows.shape[1], block):
        blk = rows[:, b0:b0 + block]
        for r in range(rows.shape[0]):
            amax = np.abs(blk[r]).max()
            e = -127 if amax == 0 else hand_exponent(fmax, amax)
            out[r, b0:b0 + block] = (blk[r] * 2.0 ** -e).astype(dt).astype(np.float64) * 2.0 ** e
    return out.reshape(a.shape).astype(np.float32)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(48, 64), nn.ReLU())
        self.head = nn.Linear(64, 40, bias=False)

    def forward(self, x):
        return self.head(self.body(x))


def run(model, x, g):
    x = x.clone().requires_grad_(True)
    y = model(x)
    y.backward(g)
    return y.detach(), x.grad


def reference(net, x, g, cast):
    """Forward and backward of Net with every operand cast by `cast(array, operand)`."""
    l1, l2 = net.body[0], net.head
    acts = {}
    xq1, wq1 = cast(to_np(x), "x", "body"), cast(to_np(l1.weight), "w", "body")
    h = F.relu(F.linear(to_torch(xq1), to_torch(wq1), l1.bias.detach()))
    xq2, wq2 = cast(to_np(h), "x", "head"), cast(to_np(l2.weight), "w", "head")
    y = F.linear(to_torch(xq2), to_torch(wq2))
    dyq2 = to_torch(cast(to_np(g), "dy", "head"))
    acts["dw2"] = dyq2.t() @ to_torch(xq2)
    dh = (dyq2 @ to_torch(wq2)) * (h > 0)
    dyq1 = to_torch(cast(to_np(dh), "dy", "body"))
    acts["dw1"] = dyq1.t() @ to_torch(xq1)
    acts["db1"] = dh.sum(0)
    acts["dx"] = dyq1 @ to_torch(wq1)
    return y, acts


@pytest.fixture
def data():
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(16, 48) * 3
    g = torch.randn(16, 40) * 1e-3
    return net, x, g


@pytest.mark.parametrize("recipe,margin", [("fp8-current", 0), ("fp8-current", 1), ("fp8-noscale", 0)])
def test_per_tensor_casts_match_ml_dtypes(data, recipe, margin):
    net, x, g = data
    wrapped = mt.wrap(copy.deepcopy(net), recipe, set=[f"cast_margin={margin}"])
    assert isinstance(wrapped.head, mt.CastLinear)
    y, dx = run(wrapped, x, g)

    def cast(a, operand, layer):
        if layer == "head" and recipe == "fp8-noscale":  # cast_readout false: the head runs in bf16
            return a.astype(ml_dtypes.bfloat16).astype(np.float32)
        fmt = "e5m2" if operand == "dy" else "e4m3fn"
        e = 0 if recipe == "fp8-noscale" else hand_exponent(FP8[fmt][1], float(np.abs(a).max()), margin)
        return hand_cast(a, fmt, e)

    y_ref, ref = reference(net, x, g, cast)
    assert torch.equal(y, y_ref)
    assert torch.allclose(dx, ref["dx"], rtol=1e-6, atol=0)
    assert torch.allclose(wrapped.head.weight.grad, ref["dw2"], rtol=1e-6, atol=0)
    assert torch.allclose(wrapped.body[0].weight.grad, ref["dw1"], rtol=1e-6, atol=0)
    assert torch.allclose(wrapped.body[0].bias.grad, ref["db1"], rtol=1e-6, atol=0)


def test_delayed_scaling_uses_the_amax_history(data):
    net, _, _ = data
    wrapped = mt.wrap(copy.deepcopy(net), "fp8-delayed")
    layer = wrapped.body[0]
    x1 = torch.randn(4, 48)
    x2 = x1 * 100  # beyond what the history's scale allows: saturates
    wrapped(x1)
    y2 = layer(x2)
    e = hand_exponent(448.0, float(x1.abs().max()))  # the scale from step 1's amax
    xq = hand_cast(to_np(x2), "e4m3fn", e)
    wq = hand_cast(to_np(layer.weight), "e4m3fn", hand_exponent(448.0, float(layer.weight.abs().max())))
    assert torch.equal(y2.detach(), F.linear(to_torch(xq), to_torch(wq), layer.bias.detach()))
    assert np.abs(xq).max() == 448.0 * 2.0 ** e  # saturated at the format's max


def test_mx_casts_match_ml_dtypes(data):
    net, x, g = data
    wrapped = mt.wrap(copy.deepcopy(net), "mxfp8")
    y, dx = run(wrapped, x, g)

    def cast(a, operand, layer):
        return hand_mx(a, "e5m2" if operand == "dy" else "e4m3fn")

    y_ref, ref = reference(net, x, g, cast)
    assert torch.equal(y, y_ref)
    assert torch.allclose(dx, ref["dx"], rtol=1e-6, atol=0)
    assert torch.allclose(wrapped.body[0].weight.grad, ref["dw1"], rtol=1e-6, atol=0)


def test_bf16_recipe_rounds_operands_and_trains(data):
    net, x, g = data
    wrapped = mt.wrap(copy.deepcopy(net), "bf16-amp")
    y, _ = run(wrapped, x, g)

    def cast(a, operand, layer):
        return a.astype(ml_dtypes.bfloat16).astype(np.float32)

    y_ref, _ = reference(net, x, g, cast)
    assert torch.equal(y, y_ref)
    # A few optimiser steps on a regression target lower the loss.
    target = torch.randn(16, 40)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.05)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = F.mse_loss(wrapped(x / 3), target)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < 0.9 * losses[0]


def test_unknown_recipe_and_set_key():
    with pytest.raises(ValueError, match="recipe"):
        mt.wrap(Net(), "no-such-recipe")
    with pytest.raises(ValueError, match="bogus"):
        mt.wrap(Net(), "fp8-current", set=["bogus=1"])
    with pytest.raises(ValueError, match="cast_scaling 'blockwise' is not supported"):
        mt.wrap(Net(), "fp8-blockwise")


def test_dlpack_round_trips():
    t = torch.randn(1000) * 10
    q = mantissa.quantize(t, "e4m3fn")
    assert isinstance(q, torch.Tensor) and q.dtype == torch.float32
    ref = to_np(t).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert np.array_equal(to_np(q), ref)
    codes = torch.empty(1000, dtype=torch.uint8)
    assert mantissa.encode(t, "e4m3fn", out=codes) is codes  # written in place through DLPack
    assert np.array_equal(to_np(codes), mantissa.from_ml_dtypes(ref.astype(ml_dtypes.float8_e4m3fn)))
    back = mantissa.decode(codes, "e4m3fn")
    assert isinstance(back, torch.Tensor) and np.array_equal(to_np(back), ref)
    # A numpy result shares its memory with the tensor made from it.
    a = mantissa.quantize(to_np(t), "bf16")
    ta = to_torch(a)
    assert ta.data_ptr() == a.ctypes.data
    with pytest.raises(TypeError, match="float32"):
        mantissa.quantize(t.double(), "e4m3fn")
    with pytest.raises(ValueError, match="C-contiguous"):
        mantissa.quantize(torch.randn(8, 8).t(), "e4m3fn")
    c, s = mantissa.mx_quantize(torch.randn(4, 64), "mxfp8_e4m3")
    assert isinstance(c, torch.Tensor) and tuple(s.shape) == (4, 2)
    assert not math.isnan(float(mantissa.mx_dequantize(c, s, "mxfp8_e4m3").sum()))


def test_importing_mantissa_torch_keeps_the_thread_count():
    # A fresh interpreter: importing torch the first time is what may change it.
    import subprocess
    import sys

    code = ("import mantissa; mantissa.set_num_threads(2); import mantissa.torch; "
            "print(mantissa.num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-1] == "2"
