"""mantissa.torch's casts are the engine's quantisers': the wrapper, the engine's quantiser on its own
(mantissa.Fp8Quantiser, mantissa.Fp4Quantiser) and an independent reference (ml_dtypes, and the FP4
definitions of test_nvfp4 / test_mxfp4) give the same codes, scales and values over several steps, with
delayed scaling's amax history rolling."""

import copy

import ml_dtypes
import numpy as np
import pytest

import mantissa

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import mantissa.torch as mt  # noqa: E402
from test_mxfp4 import engine_seed, mx_hand  # noqa: E402
from test_nvfp4 import cast_by_hand, sample  # noqa: E402
from test_torch import FP8, Net, hand_exponent, reference, run, to_np, to_torch  # noqa: E402

ROLE = {"x": mantissa.OperandRole.activation, "w": mantissa.OperandRole.weight, "dy": mantissa.OperandRole.grad_output}
# Magnitudes of the steps: the amax history sees a jump up, a fall below it and a recovery.
STEP_SCALES = (0, 7, -5, -5, 3, 1)


def codes_by_hand(a, fmt, e):
    """The 1-byte codes of round(a x 2^-e), saturated, by ml_dtypes."""
    dt, fmax = FP8[fmt]
    return np.clip(a.astype(np.float64) * 2.0 ** -e, -fmax, fmax).astype(dt).view(np.uint8)


def values_by_hand(codes, fmt, e):
    return (codes.view(FP8[fmt][0]).astype(np.float64) * 2.0 ** e).astype(np.float32)


def expected_exponent(scaling, fmax, amax, history, length, margin=0):
    """The per-tensor exponent: current from this amax, delayed from the max of the last `length` past ones."""
    if scaling == "delayed" and history:
        amax = max(history[-length:])
    return hand_exponent(fmax, amax, margin)


def test_the_typed_recipe_is_the_engines():
    r = mantissa.Recipe("fp8-delayed", ["amax_history=3", "cast_margin=1"])
    d = mantissa.recipe("fp8-delayed", ["amax_history=3", "cast_margin=1"])  # the JSON form, written by C++
    assert (r.name, r.cast_forward, r.cast_backward) == ("fp8-delayed", d["cast_forward"], d["cast_backward"])
    assert r.cast_scaling == mantissa.CastScaling.delayed and r.cast_scaling.name == d["cast_scaling"]
    assert (r.amax_history, r.cast_margin, r.matmul_format) == (3, 1.0, d["matmul_format"])
    assert r.fp4_format is None and mantissa.Recipe("bf16-amp").cast_forward is None
    nv = mantissa.Recipe("nvfp4", ["bf16_layers=1,-2,head", "rht_seed=9", "fp4_sr=backward"])
    assert nv.fp4_format == mantissa.Fp4Format.nvfp4 and nv.bf16_blocks == [1, -2] and nv.bf16_head
    assert nv.rht_seed == 9 and nv.fp4_sr == mantissa.Fp4Rounding.backward and nv.rht == mantissa.RhtMode.random
    assert mantissa.Recipe("mxfp8").mx_scale_rounding == mantissa.ScaleRounding.ceil
    with pytest.raises(ValueError, match="amax_history"):
        mantissa.Recipe("fp8-delayed", ["amax_history=x"])
    with pytest.raises(ValueError, match="cast_backward"):
        mantissa.Fp8Quantiser(mantissa.Recipe("fp8-delayed", ["cast_backward="]), mantissa.OperandRole.grad_output)
    with pytest.raises(ValueError, match="FP8 quantiser"):
        mantissa.Fp8Quantiser(mantissa.Recipe("nvfp4"), mantissa.OperandRole.activation)


@pytest.mark.parametrize("operand", ["x", "w", "dy"])  # x, w: e4m3fn; dy: e5m2
@pytest.mark.parametrize("recipe", ["fp8-current", "fp8-delayed"])
def test_per_tensor_casts_over_steps(recipe, operand):
    r = mantissa.Recipe(recipe, ["amax_history=2", "cast_margin=1"])
    caster = mt.Caster(r)
    engine = mantissa.Fp8Quantiser(r, ROLE[operand])
    fmt = "e5m2" if operand == "dy" else "e4m3fn"
    assert engine.format == fmt
    rng = np.random.default_rng(1)
    history = []
    for k in STEP_SCALES:
        a = (rng.standard_normal((24, 40)) * 2.0 ** k).astype(np.float32)
        amax = float(np.abs(a).max())
        e = expected_exponent(recipe.split("-")[1], FP8[fmt][1], amax, history, 2, margin=1)
        c = engine.cast(a)
        engine.end_step()
        codes = codes_by_hand(a, fmt, e)
        assert c.exponent == e and c.block_exponents is None
        np.testing.assert_array_equal(c.codes, codes)
        np.testing.assert_array_equal(c.values, values_by_hand(codes, fmt, e))
        y = caster(to_torch(a), operand)
        np.testing.assert_array_equal(to_np(y), c.values)
        history.append(amax)
        if recipe == "fp8-delayed":  # the last two amaxes, the next scale from their max
            assert engine.history == history[-2:] == caster.quantisers[operand].history
            assert engine.next_exponent == hand_exponent(FP8[fmt][1], max(history[-2:]), 1)
        else:
            assert engine.history == [] and engine.next_exponent is None


def test_saturation_and_non_finite_inputs_as_the_engine():
    r = mantissa.Recipe("fp8-delayed")
    caster, engine = mt.Caster(r), mantissa.Fp8Quantiser(r, ROLE["x"])
    a = np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 16)
    for scale in (1, 64):  # the second step's scale comes from the first amax: 64x saturates at +-448 x 2^e
        c = engine.cast(a * scale)
        engine.end_step()
        np.testing.assert_array_equal(to_np(caster(to_torch(a * scale), "x")), c.values)
    assert np.abs(c.values).max() == 448.0 * 2.0 ** c.exponent
    bad = a.copy()
    bad[0, 0], bad[1, 1] = np.inf, np.nan
    c = engine.cast(bad)  # the history's scale, unsaturated (e4m3fn has no inf: NaN); no amax into the history
    e = hand_exponent(448.0, 64.0)
    assert c.exponent == e and np.isnan(c.values[0, 0]) and np.isnan(c.values[1, 1])
    unsaturated = (bad.astype(np.float64) * 2.0 ** -e).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) * 2.0 ** e
    np.testing.assert_array_equal(c.values, unsaturated.astype(np.float32))
    engine.end_step()
    assert engine.history == [1.0, 64.0]
    y = caster(to_torch(bad), "x")
    np.testing.assert_array_equal(to_np(y), c.values)
    assert caster.histories["x"] == [1.0, 64.0]
    current = mantissa.Fp8Quantiser(mantissa.Recipe("fp8-current"), ROLE["x"]).cast(bad)  # scale 1
    assert current.exponent == 0
    np.testing.assert_array_equal(current.values, bad.astype(ml_dtypes.float8_e4m3fn).astype(np.float32))
    in_place = bad.copy()  # the values written over the input
    q = mantissa.Fp8Quantiser(mantissa.Recipe("fp8-current"), ROLE["x"])
    assert q.cast(in_place, out=in_place).values is in_place
    np.testing.assert_array_equal(in_place, current.values)


def check_tiles(c, a, fmt, tr, tc):
    """A block-scaled cast of a [R, C] against ml_dtypes: per tr x tc tile the smallest E with the tile's
    amax x 2^-E <= max (the MX ceil and blockwise rule; 0 for a zero tile), its codes and values."""
    rows, cols = a.shape
    assert c.exponent == 0 and c.block_exponents.shape == (-(-rows // tr), -(-cols // tc))
    for i in range(0, rows, tr):
        for j in range(0, cols, tc):
            tile = a[i:i + tr, j:j + tc]
            amax = float(np.abs(tile).max())
            e = hand_exponent(FP8[fmt][1], amax) if amax > 0 else 0
            assert c.block_exponents[i // tr, j // tc] == e, (i, j)
            codes = codes_by_hand(tile, fmt, e)
            np.testing.assert_array_equal(c.codes[i:i + tr, j:j + tc], codes)
            np.testing.assert_array_equal(c.values[i:i + tr, j:j + tc], values_by_hand(codes, fmt, e))


@pytest.mark.parametrize("operand", ["x", "w", "dy"])
def test_mx_blocks_over_steps(operand):
    r = mantissa.Recipe("mxfp8")  # ceil exponents: no block clips
    caster, engine = mt.Caster(r), mantissa.Fp8Quantiser(r, ROLE[operand])
    fmt = "e5m2" if operand == "dy" else "e4m3fn"
    rng = np.random.default_rng(2)
    for k in STEP_SCALES:
        spread = 2.0 ** rng.integers(-6, 7, (6, 3)).repeat(32, 1)[:, :80]  # blocks of 32, the last of 16
        a = (rng.standard_normal((6, 80)) * spread * 2.0 ** k).astype(np.float32)
        c = engine.cast(a)
        check_tiles(c, a, fmt, 1, 32)
        np.testing.assert_array_equal(to_np(caster(to_torch(a), operand)), c.values)


@pytest.mark.parametrize("operand", ["x", "w", "dy"])
def test_blockwise_tiles_and_weight_blocks(operand):
    r = mantissa.Recipe("fp8-blockwise")  # e4m3fn everywhere: 1 x 128 tiles, 128 x 128 weight blocks
    caster, engine = mt.Caster(r), mantissa.Fp8Quantiser(r, ROLE[operand])
    rng = np.random.default_rng(4)
    a = (rng.standard_normal((130, 200)) * 2.0 ** rng.integers(-8, 9, (130, 1))).astype(np.float32)
    a[:, 128:] = 0  # zero tiles: exponent 0
    a[3, 5] = 3e4  # one value that sets its tile's scale
    c = engine.cast(a)
    check_tiles(c, a, "e4m3fn", 128 if operand == "w" else 1, 128)
    np.testing.assert_array_equal(to_np(caster(to_torch(a), operand)), c.values)


def test_wrapped_delayed_scaling_rolls_the_history_as_the_reference():
    torch.manual_seed(0)
    net = Net()
    wrapped = mt.wrap(copy.deepcopy(net), "fp8-delayed", set=["amax_history=3"])
    history = {}  # (layer, operand) -> amaxes

    def cast(a, operand, layer):
        fmt = "e5m2" if operand == "dy" else "e4m3fn"
        h = history.setdefault((layer, operand), [])
        amax = float(np.abs(a).max())
        e = expected_exponent("delayed", FP8[fmt][1], amax, h, 3)
        h.append(amax)
        return values_by_hand(codes_by_hand(a, fmt, e), fmt, e)

    for step, k in enumerate(STEP_SCALES):
        x = torch.randn(16, 48) * 2.0 ** k
        g = torch.randn(16, 40) * 2.0 ** (-10 - k)
        if step == 3:  # the weights move too: their history rolls
            for m in (net, wrapped):
                with torch.no_grad():
                    m.head.weight.mul_(16)
        for m in (net, wrapped):
            m.zero_grad(set_to_none=True)
        y, dx = run(wrapped, x, g)
        y_ref, ref = reference(net, x, g, cast)
        assert torch.equal(y, y_ref), step
        assert torch.allclose(dx, ref["dx"], rtol=1e-6, atol=0), step
        assert torch.allclose(wrapped.head.weight.grad, ref["dw2"], rtol=1e-6, atol=0), step
        with torch.no_grad():  # an evaluation pass records nothing
            wrapped(x * 1000)
    for layer, module in (("body", wrapped.body[0]), ("head", wrapped.head)):
        for operand in ("x", "w", "dy"):
            assert module.caster.histories[operand] == history[(layer, operand)][-3:], (layer, operand)
    twin = copy.deepcopy(wrapped)  # the copy's quantisers hold the same histories
    assert twin.head.caster.histories == wrapped.head.caster.histories
    x = torch.randn(16, 48) * 2.0 ** 9  # beyond the histories: the copy saturates as the original does
    assert torch.equal(twin(x), wrapped(x))
    assert not torch.equal(mt.wrap(copy.deepcopy(net), "fp8-delayed")(x), wrapped(x))


def fp4_pass(layer, x, w, dy):
    """The three products' operands of one step, cast by an engine Fp4Layer in the engine's order."""
    xq, xw = layer.cast_input(x)
    wq, wd = layer.cast_weight(w)
    return xq, wq, layer.cast_gradient(dy, False), wd, layer.cast_gradient(dy, True), xw


@pytest.mark.parametrize("recipe,sets", [
    ("nvfp4", ["bf16_layers=none", "fp4_sr=none", "rht_seed=5"]),  # nearest-even: the reference of test_nvfp4
    ("mxfp4", ["rht_seed=5"]),  # stochastic: the draws go on from step to step
])
def test_fp4_layer_over_steps(recipe, sets):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 48))
    mt.wrap(model, recipe, set=sets)
    engine = mantissa.Fp4Quantiser(mantissa.Recipe(recipe, sets)).layer(readout=True)
    assert engine.active and not model[0].caster.readout
    for step in range(3):
        if step == 2:
            with torch.no_grad():
                model[0].weight.mul_(-3)
        w = to_np(model[0].weight).copy()
        x, dy = sample((64, 64), 20 + step), sample((64, 48), 30 + step)
        model.zero_grad(set_to_none=True)
        xt = to_torch(x).requires_grad_()
        y = model(xt)
        y.backward(to_torch(dy))
        xq, wq, dyd, wd, dyw, xw = fp4_pass(engine, x, w, dy)
        b = to_torch(to_np(model[0].bias))
        assert torch.equal(y.detach(), F.linear(to_torch(xq), to_torch(wq), b)), step
        assert torch.equal(xt.grad, to_torch(dyd) @ to_torch(wd)), step
        assert torch.equal(model[0].weight.grad, to_torch(dyw).t() @ to_torch(xw)), step
        if recipe == "nvfp4":
            np.testing.assert_array_equal(xq, cast_by_hand(x))
            np.testing.assert_array_equal(wq, cast_by_hand(w, block="16x16"))
            np.testing.assert_array_equal(wd, wq)  # dgrad multiplies the forward's 2-D cast
            np.testing.assert_array_equal(dyd, cast_by_hand(dy))
            np.testing.assert_array_equal(dyw, cast_by_hand(mantissa.rht(dy, 0, seed=5), axis=0))
            np.testing.assert_array_equal(xw, cast_by_hand(mantissa.rht(x, 0, seed=5), axis=0))
        else:  # bf16 forward; every backward input stochastic, both backward products rotated
            bf16 = lambda a: a.astype(ml_dtypes.bfloat16).astype(np.float32)  # noqa: E731
            np.testing.assert_array_equal(xq, bf16(x))
            np.testing.assert_array_equal(wq, bf16(w))
            # Draws in the engine's order (x's and W's backward casts in forward, then dy's), one stream
            # across steps; a weight is cast once per change of its values: step 1 reuses step 0's.
            xw_seed, wd_seed, dyd_seed, dyw_seed = {0: (0, 1, 2, 3), 1: (4, 1, 5, 6), 2: (7, 8, 9, 10)}[step]
            np.testing.assert_array_equal(xw, mx_hand(mantissa.rht(x, 0, seed=5), 0, True, engine_seed(5, xw_seed)))
            np.testing.assert_array_equal(wd, mx_hand(mantissa.rht(w, 0, seed=5), 0, True, engine_seed(5, wd_seed)))
            np.testing.assert_array_equal(dyd, mx_hand(mantissa.rht(dy, 1, seed=5), -1, True,
                                                       engine_seed(5, dyd_seed)))
            np.testing.assert_array_equal(dyw, mx_hand(mantissa.rht(dy, 0, seed=5), 0, True,
                                                       engine_seed(5, dyw_seed)))
