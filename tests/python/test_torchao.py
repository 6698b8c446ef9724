"""mantissa.mx_quantize / nvfp4_quantize against torchao's MX and NVFP4 quantisers
(torchao.prototype.mx_formats: to_mx with FLOOR scales, nvfp4_quantize with a
per-tensor scale), run on the CPU: element codes and block scales bit for bit.

torchao needs PyTorch 2.x, which the test venv (Debian's torch) does not have;
`bash bench/torch_venv.sh` installs both into the benchmark venv:

    PY=$(bash bench/torch_venv.sh)
    $PY -m pip install pytest ml_dtypes gfloat scikit-build-core nanobind
    $PY -m pip install --no-build-isolation .
    $PY -m pytest tests/python/test_torchao.py
"""

import numpy as np
import pytest

import mantissa

torch = pytest.importorskip("torch")
if int(torch.__version__.split(".")[0]) < 2:
    pytest.skip(f"torchao needs PyTorch 2.x, this is {torch.__version__} (bash bench/torch_venv.sh installs both)",
                allow_module_level=True)
pytest.importorskip("torchao", reason="torchao is not installed (bash bench/torch_venv.sh installs it with PyTorch 2.x)")
from torchao.prototype.mx_formats.config import ScaleCalculationMode  # noqa: E402
from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2  # noqa: E402
from torchao.prototype.mx_formats.mx_tensor import to_mx  # noqa: E402
from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale  # noqa: E402

F32 = np.float32


def sample(rows, cols, seed, spread):
    """Heavy-tailed values, each 16 along a row sharing a power of two in [2^-spread, 2^spread), 5% zeros."""
    rng = np.random.default_rng(seed)
    x = rng.standard_t(2.0, (rows, cols)) * 2.0 ** rng.integers(-spread, spread, (rows, cols // 16)).repeat(16, 1)
    x[rng.random(x.shape) < 0.05] = 0
    return x.astype(F32)


def packed(codes):
    """One code per byte -> two per byte, element 2j in the low nibble (torchao's pack_uint4)."""
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)


MX = [(torch.float8_e4m3fn, "mxfp8_e4m3"), (torch.float8_e5m2, "mxfp8_e5m2"), (DTYPE_FP6_E2M3, "mxfp6_e2m3"),
      (DTYPE_FP6_E3M2, "mxfp6_e3m2"), (torch.float4_e2m1fn_x2, "mxfp4")]


@pytest.mark.parametrize("dtype,preset", MX, ids=[p for _, p in MX])
@pytest.mark.parametrize("spread", [6, 40])
def test_mx_codes_and_scales_equal_torchao(dtype, preset, spread):
    x = sample(96, 256, 1, spread)
    scales, data = to_mx(torch.from_numpy(x.copy()), dtype, 32, ScaleCalculationMode.FLOOR)
    codes, ms = mantissa.mx_quantize(x, preset, 32)
    np.testing.assert_array_equal(ms, scales.view(torch.uint8).numpy())
    want = data.view(torch.uint8).numpy()
    np.testing.assert_array_equal(packed(codes) if preset == "mxfp4" else codes, want)


def test_nvfp4_equals_torchao_where_the_block_scale_floor_does_not_bind():
    # Two-level NVFP4: t = amax / (6 x 448); block scale e4m3(clip((amax_b / 6) / t, floor, 448)).
    # torchao clips at E4M3's smallest normal, 2^-6; mantissa at its smallest subnormal, 2^-9,
    # so blocks whose amax is below amax / 28672 (6 x 2^-6 x t) keep more precision in mantissa.
    # Everywhere else the tensor scale, the block scales and the codes are the same bits.
    for spread in (4, 20):
        x = sample(256, 512, 2 + spread, spread)
        amax = torch.tensor(float(np.abs(x).max()))
        scales, data = nvfp4_quantize(torch.from_numpy(x.copy()), 16, per_tensor_amax_to_scale(amax))
        codes, ms, t = mantissa.nvfp4_quantize(x, packed=True)
        assert t == float(per_tensor_amax_to_scale(amax))
        block_max = np.abs(x).reshape(x.shape[0], -1, 16).max(-1)
        floor_binds = (block_max / F32(6)) / F32(t) < F32(2.0 ** -6)
        scale_diff = ms != scales.view(torch.uint8).numpy()
        code_diff = (codes != data.numpy()).reshape(x.shape[0], -1, 8).any(-1)
        assert not (scale_diff & ~floor_binds).any() and not (code_diff & ~floor_binds).any()
        if spread == 4:  # no block that small: every bit equal
            assert not floor_binds.any()
        else:  # where torchao's floor binds, its scale is 2^-6 (code 8) and mantissa's smaller
            assert floor_binds.any()
            theirs = scales.view(torch.uint8).numpy()[floor_binds]
            assert (theirs == 8).all() and (ms[floor_binds] <= 8).all() and scale_diff[floor_binds].any()
