#!/usr/bin/env python3
"""Writes tests/io/data/reference.safetensors with the reference safetensors
implementation (the Rust core behind the `safetensors` PyPI package), so that
tests/io/test_safetensors.cpp checks mantissa's reader against files the
Python ecosystem produces. Low-precision codes come from ml_dtypes.

    python3 -m venv /tmp/st && /tmp/st/bin/pip install safetensors numpy ml_dtypes
    /tmp/st/bin/python tests/io/make_golden_safetensors.py

Every value below is exactly representable in its format, so the C++ test
can compare decoded values for equality.
"""
import os

import ml_dtypes
import numpy as np
import safetensors
from safetensors import TensorSpec, serialize_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "reference.safetensors")


KEEP = []  # the arrays must outlive serialize_file (it reads raw pointers)


def entry(dtype_name, array):
    array = np.ascontiguousarray(array)
    KEEP.append(array)
    return TensorSpec(dtype=dtype_name, shape=list(array.shape), data_ptr=array.ctypes.data, data_len=array.nbytes)


tensors = {
    "transformer.wte.weight": entry("float32", (np.arange(12, dtype=np.float32) * 0.5 - 2.0).reshape(3, 4)),
    "h.bf16": entry("bfloat16", np.array([1.0, -2.5, 3.140625, 0.0, 2.0**-133], dtype=ml_dtypes.bfloat16)),
    "h.f16": entry("float16", np.array([[0.5, 65504.0], [-(2.0**-10), 2.0**-24]], dtype=np.float16)),
    "q.e4m3": entry("float8_e4m3fn", np.array([448.0, -(2.0**-9), 1.5, 0.0], dtype=ml_dtypes.float8_e4m3fn)),
    "q.e5m2": entry("float8_e5m2", np.array([57344.0, -(2.0**-16), 3.0], dtype=ml_dtypes.float8_e5m2)),
    "idx": entry("int32", np.array([7, -1, 2147483647], dtype=np.int32)),
}
os.makedirs(os.path.dirname(OUT), exist_ok=True)
serialize_file(tensors, OUT, metadata={"format": "pt", "writer": "safetensors " + safetensors.__version__})
print(OUT)
