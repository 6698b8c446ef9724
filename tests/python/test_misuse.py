"""Arrays and arguments a careless or hostile caller hands the bindings: outputs
that overlap an input, read-only outputs, counts beyond the input, integers out
of range and an unbounded stream of format specs. Each gives a Python exception
naming the argument; what is accepted gives ml_dtypes' values."""

import mmap
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

import mantissa


def e4m3(x):
    return x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)


def test_an_output_overlapping_an_input_is_refused():
    b = np.linspace(-3, 3, 17, dtype=np.float32)
    with pytest.raises(ValueError, match="out: overlaps the input x"):
        mantissa.quantize(b[:-1], "e4m3fn", out=b[1:])  # numpy's direct path
    with pytest.raises(ValueError, match="out: overlaps the input x"):
        mantissa.quantize(b[:-1], "e4m3fn", "stochastic", out=b[1:])
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    with pytest.raises(ValueError, match="out: overlaps the input x"):
        mantissa.encode(x, "e4m3fn", out=x.view(np.uint8)[:64])
    with pytest.raises(ValueError, match="out: overlaps the input x"):  # packed codes: the general path
        mantissa.encode(x.reshape(4, 16), "e2m1fn", packed=True, out=x.view(np.uint8)[:32].reshape(4, 8))
    with pytest.raises(ValueError, match="out: overlaps the input x"):  # an ml_dtypes output
        mantissa.encode(x, "e4m3fn", out=x.view(np.uint8)[100:164].view(ml_dtypes.float8_e4m3fn))
    buf = np.zeros(256, np.uint8)
    with pytest.raises(ValueError, match="out: overlaps the input codes"):
        mantissa.decode(buf[:64], "e4m3fn", out=buf.view(np.float32))
    with pytest.raises(ValueError, match="out: overlaps the input codes"):
        mantissa.decode(buf[:32].reshape(1, 32), "e2m1fn", packed=True, out=buf.view(np.float32).reshape(1, 64))
    with pytest.raises(ValueError, match="dst: overlaps the input src"):
        mantissa._core.memcpy(buf[:128], buf[64:192])

    # MX: the codes over x, and the codes and scales in one buffer.
    xm = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)
    with pytest.raises(ValueError, match=r"out\[0\] \(codes\): overlaps the input x"):
        mantissa.mx_quantize(xm, out=(xm.view(np.uint8).reshape(-1)[:64].reshape(2, 32), np.zeros((2, 1), np.uint8)))
    one = np.ones((4, 1), np.float32)  # one-value rows: codes and scales have the same shape
    same = np.zeros((4, 1), np.uint8)
    with pytest.raises(ValueError, match=r"out\[1\] \(scales\): overlaps out\[0\] \(codes\)"):
        mantissa.mx_quantize(one, out=(same, same))
    shared = np.zeros(96, np.uint8)
    with pytest.raises(ValueError, match=r"out\[1\] \(scales\): overlaps out\[0\] \(codes\)"):
        mantissa.mx_quantize(xm, out=(shared[:64].reshape(2, 32), shared[63:65].reshape(2, 1)))

    # Adjacent views of one buffer do not overlap, and the same array in
    # place is an element-wise cast: both give ml_dtypes' values.
    ref = e4m3(b)
    lo, hi = b[:8].copy(), b[8:16].copy()
    pair = np.concatenate([lo, hi])
    assert mantissa.quantize(pair[:8], "e4m3fn", out=pair[8:]) is not None
    assert np.array_equal(pair[8:], e4m3(lo))
    c, s = mantissa.mx_quantize(xm, out=(shared[:64].reshape(2, 32), shared[64:66].reshape(2, 1)))
    rc, rs = mantissa.mx_quantize(xm)
    assert np.array_equal(c, rc) and np.array_equal(s, rs)
    inplace = b.copy()
    mantissa.quantize(inplace, "e4m3fn", out=inplace)
    assert np.array_equal(inplace, ref)


def test_a_read_only_numpy_output_is_refused(tmp_path):
    x = np.ones(16, np.float32)
    path = tmp_path / "ro.bin"
    path.write_bytes(bytes(64))
    ro = np.memmap(path, np.float32, mode="r", shape=(16,))  # a numpy subclass, mapped read-only
    with pytest.raises(ValueError, match="out: the array is read-only"):
        mantissa.quantize(x, "e4m3fn", out=ro)
    with pytest.raises(ValueError, match="out: the array is read-only"):
        mantissa.decode(np.zeros(16, np.uint8), "e4m3fn", out=ro)
    codes = np.zeros(16, np.uint8)
    codes.flags.writeable = False
    with pytest.raises(ValueError, match=r"out\[0\] \(codes\): the array is read-only"):
        mantissa.mx_quantize(x.reshape(1, 16), out=(codes.reshape(1, 16), np.zeros((1, 1), np.uint8)))
    assert path.read_bytes() == bytes(64)


def test_a_read_only_torch_output_is_refused(tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "ro.bin"
    path.write_bytes(bytes(64))
    # In a child: without the check the write faults on the read-only pages.
    script = textwrap.dedent(f"""
        import mmap, warnings
        import numpy as np, torch, mantissa
        warnings.simplefilter("ignore")
        with open({str(path)!r}, "rb") as f:
            m = mmap.mmap(f.fileno(), 64, prot=mmap.PROT_READ)
        out = torch.frombuffer(m, dtype=torch.float32)
        x = torch.ones(16)
        for call in (lambda: mantissa.quantize(x, "e4m3fn", out=out),
                     lambda: mantissa.encode(torch.ones(64), "e4m3fn", out=torch.frombuffer(m, dtype=torch.uint8)),
                     lambda: mantissa.decode(torch.zeros(16, dtype=torch.uint8), "e4m3fn", out=out)):
            try:
                call()
                print("written")
            except ValueError as e:
                print(e)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["out: the array is read-only (its memory is mapped without write access)"] * 3
    assert path.read_bytes() == bytes(64)


def test_counts_beyond_the_input_are_refused():
    empty = np.zeros((1, 0), np.uint8)
    for count in (2**64 - 1, 2**63 - 1, 1):
        with pytest.raises(ValueError, match="count"):
            mantissa.decode(empty, "e2m1fn", packed=True, count=count)
        with pytest.raises(ValueError, match="count"):
            mantissa.nvfp4_dequantize(empty, empty, 1.0, packed=True, count=count)
        with pytest.raises(ValueError, match="count"):
            mantissa.mxfp4_dequantize(empty, empty, 1.0, "32x32", packed=True, count=count)
    # The bindings themselves, below the Python layer's range check.
    with pytest.raises(ValueError, match="count"):
        mantissa._core.decode_dlpack(empty, "e2m1fn", True, 2**64 - 1)
    with pytest.raises(ValueError, match="count"):
        mantissa._core.fp4_dequantize(empty, empty, 1.0, "nvfp4", 1, 16, True, 2**64 - 1)
    with pytest.raises(ValueError, match="count"):
        mantissa.decode(np.zeros((2, 3), np.uint8), "e2m1fn", packed=True, count=-1)
    with pytest.raises(ValueError, match="too large"):
        mantissa._core.stochastic_bits(0, 2**62)
    # A count the bytes do hold: ml_dtypes' values.
    codes = np.array([[0x21, 0x0F]], np.uint8)
    ref = np.array([0x1, 0x2, 0xF], np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    assert np.array_equal(mantissa.decode(codes, "e2m1fn", packed=True, count=3), ref.reshape(1, 3))


def test_integer_arguments_out_of_range_raise_value_error():
    x = np.ones((4, 32), np.float32)
    for seed in (-1, 2**64):
        for call in (lambda: mantissa.quantize(x, "e4m3fn", "stochastic", seed=seed),
                     lambda: mantissa.encode(x, "e4m3fn", seed=seed),
                     lambda: mantissa.nvfp4_quantize(x, seed=seed),
                     lambda: mantissa.mxfp4_quantize(x, "32x32", seed=seed),
                     lambda: mantissa.rht(x, seed=seed)):
            with pytest.raises(ValueError, match=r"seed: must be in 0\.\.2\^64-1, got " + str(seed)):
                call()
    with pytest.raises(ValueError, match=r"random_bits: must be in 1\.\.32, got 1099511627776"):
        mantissa.quantize(x, "e4m3fn", "stochastic", random_bits=2**40)
    for block in (2**31, 2**64, 0):
        with pytest.raises(ValueError, match=r"block: must be in 1\.\.2147483647, got " + str(block)):
            mantissa.mx_quantize(x, block=block)
        with pytest.raises(ValueError, match="block: must be in"):
            mantissa.mx_dequantize(np.zeros((4, 32), np.uint8), np.zeros((4, 1), np.uint8), block=block)
    with pytest.raises(TypeError, match="seed: expected an int, got float"):
        mantissa.quantize(x, "e4m3fn", seed=1.5)
    with pytest.raises(TypeError, match="block: expected an int, got str"):
        mantissa.mx_quantize(x, block="32")
    # The largest seed and a numpy integer are seeds like any other.
    a = mantissa.quantize(x, "e4m3fn", "stochastic", seed=2**64 - 1)
    assert np.array_equal(a, mantissa.quantize(x, "e4m3fn", "stochastic", seed=np.uint64(2**64 - 1)))


def test_the_format_cache_is_bounded():
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    ref = e4m3(x)
    assert np.array_equal(mantissa.quantize(x, "e4m3fn"), ref)
    user = mantissa.quantize(x, "e3m3:bias=4")
    specs = [f"e{e}m{m}{opt}" for e in range(2, 9) for m in range(1, 23 - e) for opt in ("", ":subnormals=0", ":negzero=0")]
    assert len(specs) > 256
    for spec in specs:
        assert mantissa.format_info(spec)["mantissa_bits"] == int(spec.split("m")[1].split(":")[0])
    assert mantissa._core.format_cache_size() <= 256
    # Dropped from the cache, a spec still means its format.
    assert np.array_equal(mantissa.quantize(x, "e4m3fn"), ref)
    assert np.array_equal(mantissa.quantize(x, "e3m3:bias=4"), user)
    assert mantissa.format_info("e4m3fn")["max"] == 448.0
