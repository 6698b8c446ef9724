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
    with pytest.raises(ValueError, match="cast_scaling 'propagate' is not supported"):
        mt.wrap(Net(), "scalify-fp8")


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


# transformers' Conv1D, and what wrap() reports.

class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D as transformers writes it: weight [nx, nf], y = x @ W + b."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


def supported_recipes():
    """(recipe, set) for every registered recipe wrap() takes (FP4 ones with the head in bf16 if they need it)."""
    out = []
    for r in mantissa.recipes():
        for s in ([], ["bf16_layers=head"]):
            try:
                mt.wrap(nn.Sequential(nn.Linear(32, 32)), r["name"], set=s)
            except ValueError:
                continue
            out.append((r["name"], s))
            break
    return out


SUPPORTED = supported_recipes()


def test_the_recipe_list_holds_every_kind_of_cast():
    names = {n for n, _ in SUPPORTED}
    assert {"fp32", "bf16-amp", "fp16-amp", "fp8-noscale", "fp8-current", "fp8-delayed", "mxfp8", "fp8-blockwise",
            "nvfp4", "mxfp4", "mxfp4-fwd"} <= names


def conv1d_and_linear_pair():
    """Two Conv1D layers and two nn.Linear holding their transposed weights; magnitudes spread by 2^-6..2^6
    along both axes of each weight, so blocks or scales taken along the wrong axis change the bits."""
    g = torch.Generator().manual_seed(3)
    conv = nn.Sequential(Conv1D(96, 64), nn.GELU(), Conv1D(48, 96))
    lin = nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 48))
    with torch.no_grad():
        for c, l in ((conv[0], lin[0]), (conv[2], lin[2])):
            nx, nf = c.weight.shape
            rows = 2.0 ** torch.randint(-6, 7, (nx, 1), generator=g)
            cols = 2.0 ** torch.randint(-6, 7, (1, nf), generator=g)
            c.weight.copy_(torch.randn(nx, nf, generator=g) * rows * cols * 0.05)
            c.bias.copy_(torch.randn(nf, generator=g) * 0.1)
            l.weight.copy_(c.weight.t())
            l.bias.copy_(c.bias)
    return conv, lin, g


@pytest.mark.parametrize("recipe,sets", SUPPORTED, ids=[n for n, _ in SUPPORTED])
def test_conv1d_matches_the_transposed_linear_bit_for_bit(recipe, sets):
    conv, lin, g = conv1d_and_linear_pair()
    fp32 = copy.deepcopy(conv)
    mt.wrap(conv, recipe, set=sets)
    mt.wrap(lin, recipe, set=sets)
    assert isinstance(conv[0], mt.CastConv1D) and isinstance(conv[2], mt.CastConv1D)
    assert conv.mantissa_report.wrapped == {"Conv1D": 2} and lin.mantissa_report.wrapped == {"Linear": 2}
    for step in range(2):  # the second step scales from the first's amaxes under delayed scaling
        x = torch.randn(2, 32, 64, generator=g) * 2.0 ** torch.randint(-4, 5, (1, 1, 64), generator=g)
        dy = torch.randn(2, 32, 48, generator=g) * 1e-3
        for m in (conv, lin, fp32):
            m.zero_grad(set_to_none=True)
        yc, dxc = run(conv, x, dy)
        yl, dxl = run(lin, x, dy)
        assert torch.equal(yc, yl), step
        assert torch.equal(dxc, dxl), step
        for c, l in ((conv[0], lin[0]), (conv[2], lin[2])):
            assert c.weight.grad.shape == c.weight.shape
            assert torch.equal(c.weight.grad, l.weight.grad.t()), step
            assert torch.equal(c.bias.grad, l.bias.grad), step
        r = mantissa.recipe(recipe, sets)
        if r.get("cast_forward") or r.get("fp4_format", "none") != "none" or r.get("matmul_format", "fp32") != "fp32":
            assert not torch.equal(yc, run(fp32, x, dy)[0])  # the casts are there: the output is not fp32's


class Mixed(nn.Module):
    """A Linear, a Conv1D, an MHA, a Conv2d, a matrix used through F.linear and an embedding used as a tied head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(40, 32)
        self.proj = Conv1D(32, 32)
        self.attn = nn.MultiheadAttention(32, 2, batch_first=True)
        self.conv = nn.Conv2d(1, 1, 3, padding=1)
        self.mix = nn.Linear(32, 32)
        self.gate = nn.Parameter(torch.randn(32, 32) * 0.1)

    def forward(self, ids):
        h = self.emb(ids)
        h = self.proj(h)
        h = h + self.attn(h, h, h, need_weights=False)[0]
        h = h + self.conv(h[:, None])[:, 0]
        h = self.mix(h) + F.linear(h, self.gate)
        return h @ self.emb.weight.t()


def test_report_counts_what_is_cast_and_names_what_is_left(caplog):
    torch.manual_seed(0)
    model = Mixed()
    ids = torch.randint(0, 40, (2, 8))
    y0 = model(ids)
    with caplog.at_level("INFO", logger="mantissa.torch"), pytest.warns(mt.UncastWarning) as warned:
        out = mt.wrap(model, "fp8-delayed")
    assert out is model
    rep = model.mantissa_report
    assert rep.wrapped == {"Conv1D": 1, "Linear": 1} and rep.layers == ["proj", "mix"]
    assert isinstance(model.proj, mt.CastConv1D) and isinstance(model.mix, mt.CastLinear)
    # The MHA's out_proj is an nn.Linear the MHA never calls: left as it is, the MHA named instead.
    assert type(model.attn.out_proj) is nn.modules.linear.NonDynamicallyQuantizableLinear
    assert [(u.name, u.kind) for u in rep.uncast] == [("attn", "MultiheadAttention"), ("conv", "Conv2d")]
    assert rep.uncast_counts == {"MultiheadAttention": 1, "Conv2d": 1}
    assert [(u.name, u.kind) for u in rep.unseen] == [("", "Mixed")] and "gate [32, 32]" in rep.unseen[0].what
    assert rep.tied == {} and rep.readout is None
    logged = [r.getMessage() for r in caplog.records if r.name == "mantissa.torch"]
    assert len(logged) == 1 and "2 products cast (Conv1D 1, Linear 1)" in logged[0]
    assert len(warned) == 1 and "'attn'" in str(warned[0].message) and "'conv'" in str(warned[0].message)
    assert not torch.equal(model(ids), y0)

    # With inputs, one forward pass finds the functional products: F.linear on `gate`, the tied head's matmul.
    model2 = Mixed()
    with pytest.warns(mt.UncastWarning):
        mt.wrap(model2, "mxfp8", inputs=(ids,))
    rep2 = model2.mantissa_report
    assert rep2.unseen == []
    left = {u.name: u.what for u in rep2.uncast}
    assert list(left) == ["attn", "conv", ""]
    calls = left[""].split("; ")
    assert len(calls) == 2 and calls[0].startswith("linear(") and "[32, 32] 'gate'" in calls[0]
    assert calls[1].startswith("matmul(") and "[32, 40] 'emb.weight (an embedding: a tied head)'" in calls[1]


def test_strict_refuses_before_changing_anything():
    model = Mixed()
    with pytest.raises(ValueError, match=r"'attn' \(MultiheadAttention.*'conv' \(Conv2d"):
        mt.wrap(model, "fp8-current", strict=True)
    assert type(model.proj) is Conv1D and type(model.mix) is nn.Linear
    assert not hasattr(model, "mantissa_report")


def test_audit_leaves_the_casts_state_as_it_was(data):
    net, x, _ = data
    a = mt.wrap(copy.deepcopy(net), "fp8-delayed")
    b = mt.wrap(copy.deepcopy(net), "fp8-delayed")
    a.train()
    a.body.eval()
    assert mt.audit(a, (x * 1000,)) == []  # every product is cast
    assert a.head.caster.histories == {} and a.body[0].caster.histories == {}
    assert a.training and not a.body.training and a.head.training
    assert torch.equal(a(x), b(x))
    with pytest.raises(ValueError, match="not a layer itself"):
        mt.wrap(Conv1D(4, 4), "fp8-current")


def test_tied_linear_head_and_readout_are_reported():
    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(64, 32)
            self.fc = Conv1D(32, 32)
            self.head = nn.Linear(32, 64, bias=False)
            self.head.weight = self.wte.weight

        def forward(self, ids):
            return self.head(self.fc(self.wte(ids)))

    model = mt.wrap(Tiny(), "fp8-noscale")  # cast_readout false: the head runs in bf16
    rep = model.mantissa_report
    assert rep.tied == {"wte": "head"} and rep.readout == "head" and rep.wrapped == {"Conv1D": 1, "Linear": 1}
    assert model.head.caster.readout and not model.fc.caster.readout
    assert "readout 'head'" in str(rep) and "'wte' is the weight of cast 'head'" in str(rep)


def test_a_conv1d_that_is_not_transformers_is_left_and_named():
    class Conv1D(nn.Module):  # a convolution under the same class name: weight [out, in, k], no `nf`
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(8, 4, 3))

        def forward(self, x):
            return F.conv1d(x, self.weight)

    model = nn.Sequential(Conv1D(), nn.Flatten(), nn.Linear(8 * 6, 4))
    with pytest.warns(mt.UncastWarning, match=r"maybe '0' \(Conv1D: holds weight \[8, 4, 3\]"):
        mt.wrap(model, "fp8-current")
    assert type(model[0]) is Conv1D and model.mantissa_report.wrapped == {"Linear": 1}
    assert not mt.is_conv1d(model[0])
    with pytest.warns(mt.UncastWarning, match=r"'0' \(Conv1D: conv1d\(\[2, 4, 8\], \[8, 4, 3\] '0.weight'\)\)"):
        mt.wrap(copy.deepcopy(model), "fp8-current", inputs=(torch.randn(2, 4, 8),))


def test_recognising_conv1d_does_not_import_transformers():
    import subprocess
    import sys

    code = ("import sys, torch, mantissa.torch as mt\n"
            "class Conv1D(torch.nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__(); self.nf = 3\n"
            "        self.weight = torch.nn.Parameter(torch.randn(2, 3))\n"
            "        self.bias = torch.nn.Parameter(torch.zeros(3))\n"
            "m = mt.wrap(torch.nn.Sequential(Conv1D()), 'fp8-current')\n"
            "print(type(m[0]).__name__, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-2:] == ["CastConv1D", "False"]
