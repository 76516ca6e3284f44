"""The fused GeLU + FP8 cast kernels (helpers/precision/fp8_gelu_cast_gpu.py) in Triton's
interpreter on CPU, against what they replace: torch's bf16 GeLU (or GeLU backward) followed by
the delayed-recipe cast kernel (fp8_cast_gpu.delayed_cast, checked against torch on its own in
test_fp8_cast_gpu.py). Both run in the interpreter, whose FP8 conversion truncates (the GPU rounds
to nearest even); they share that conversion, so equal bytes mean the fused kernel fed it the same
bf16 values torch computes. The GeLU input is every bf16 value in [-3, 3] (exhaustive): beyond
that, 1 + erf(x / sqrt 2) cancels and the CPU's erf (torch's) and the interpreter's (numpy's)
differ in their last bits; on the GPU both sides call CUDA's erff, and benchmarks/gpu_precision.py
counts differing bytes over a real FC1 output."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
FORMATS = {"e4m3": (torch.float8_e4m3fn, 448.0), "e5m2": (torch.float8_e5m2, 57344.0)}


def every_bf16_within(limit: float, cols: int = 300) -> torch.Tensor:
    """All normal bf16 values with |x| <= limit, and zero, as a ragged [rows, cols] matrix
    (zero-padded). Subnormals (|x| < 1.2e-38) are left out: torch's CPU kernels treat them as
    zero, the interpreter does not."""
    values = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    normal = values.abs() >= torch.finfo(torch.bfloat16).tiny
    values = values[torch.isfinite(values) & (values.abs() <= limit) & (normal | (values == 0))]
    rows = -(-values.numel() // cols)
    out = torch.zeros(rows * cols, dtype=torch.bfloat16)
    out[: values.numel()] = values
    return out.reshape(rows, cols)


def compare_all() -> dict:
    from helpers.precision import fp8_cast_gpu, fp8_gelu_cast_gpu
    h = every_bf16_within(3.0)
    dg = torch.randn(h.shape, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    cases = {"gelu": (fp8_gelu_cast_gpu.gelu_delayed_cast, (h,), torch.nn.functional.gelu(h)),
             "gelu_backward": (fp8_gelu_cast_gpu.gelu_backward_delayed_cast, (dg, h),
                               torch.ops.aten.gelu_backward(dg, h))}
    out = {"values": h.numel()}
    for op, (kernel, inputs, torch_result) in cases.items():
        for fname, (dtype, fmax) in FORMATS.items():
            scale = torch.tensor(fmax) / torch_result.float().abs().max() / 0.75  # the top quarter saturates
            bits, want_bits = torch.zeros((), dtype=torch.int32), torch.zeros((), dtype=torch.int32)
            q, qt = kernel(*inputs, fmax, dtype, scale, bits, True, True)
            want, want_t = fp8_cast_gpu.delayed_cast(torch_result, fmax, dtype, scale, want_bits, True, True)
            out[f"{op}-{fname}"] = {
                "plain_differing": int((q.view(torch.uint8) != want.view(torch.uint8)).sum()),
                "transposed_differing": int((qt.view(torch.uint8) != want_t.view(torch.uint8)).sum()),
                "amax": [float(bits.view(torch.float32)), float(torch_result.float().abs().max())],
                "saturated": int((q.float().abs() == fmax).sum())}
        _, only_t = kernel(*inputs, 448.0, torch.float8_e4m3fn, torch.tensor(1.0), torch.zeros((), dtype=torch.int32),
                           False, True)
        out[f"{op}-transposed_only"] = only_t is not None and only_t.shape == (h.shape[1], h.shape[0])
    nan = torch.zeros(8, 16, dtype=torch.bfloat16)
    nan[3, 5] = float("nan")
    bits = torch.zeros((), dtype=torch.int32)
    q, _ = fp8_gelu_cast_gpu.gelu_delayed_cast(nan, 448.0, torch.float8_e4m3fn, torch.tensor(1.0), bits)
    out["nan_amax"] = bool(torch.isnan(bits.view(torch.float32)))  # (the interpreter's FP8 NaN is not the GPU's: q unchecked)
    try:
        fp8_gelu_cast_gpu.gelu_backward_delayed_cast(dg, h[:, :10].contiguous(), 448.0, torch.float8_e4m3fn,
                                                     torch.tensor(1.0), bits)
        out["shape_error"] = None
    except ValueError as e:
        out["shape_error"] = str(e)
    return out


@pytest.fixture(scope="module")
def compared():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", [f"{op}-{f}" for op in ("gelu", "gelu_backward") for f in FORMATS])
def test_fused_kernel_equals_torch_gelu_then_the_delayed_cast(compared, case):
    got = compared[case]
    assert got["plain_differing"] == 0 and got["transposed_differing"] == 0, got
    assert got["amax"][0] == got["amax"][1]  # the amax of torch's bf16 result, measured on the way
    assert got["saturated"] > 0  # the scale given is used (values above 3/4 of the amax clip)


def test_inputs_cover_every_bf16_value_of_the_range_one_layout_and_nan(compared):
    assert compared["values"] > 30000  # all bf16 values in [-3, 3], ~2 x 125 binades x 128
    assert compared["gelu-transposed_only"] and compared["gelu_backward-transposed_only"]
    assert compared["nan_amax"]  # a NaN is not hidden from the NaN checks
    assert "shapes differ" in compared["shape_error"]


if __name__ == "__main__":
    print(json.dumps(compare_all()))
