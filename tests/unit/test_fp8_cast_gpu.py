"""The GPU quantiser (helpers/precision/fp8_cast_gpu.py, a Triton kernel) against the torch one it
replaces (recipes.scale_and_cast_to), run on CPU in Triton's interpreter: every layout (row-major,
transposed, both), every scale granularity (tensor, row, column), ragged edges (shapes that are
not multiples of the tile) and all-zero rows must give the same bytes and the same dequantisation
multipliers. The inputs are chosen so that no value needs rounding (FP8 values times powers of two,
the format's max replaced by 256), because the interpreter's FP8 conversion does not round as the
GPU does (a rounded-up mantissa is not carried into the exponent); the delayed recipe's kernel
(scale given, amax measured) is checked the same way; what is left to the GPU is the
hardware's round-to-nearest-even, which benchmarks/speed/precision.py compares byte for byte."""
from __future__ import annotations

import json

import pytest
import torch

FMAX = 256.0  # a power of two: scale = 2^k exactly, so x * scale is an FP8 value
DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
DIMS = {"tensor": None, "row": -1, "column": 0}


def exact_input(shape, dtype, dim, seed=0) -> torch.Tensor:
    """FP8 values in [-1, 1], each slice along the scale's granularity times its own power of two,
    one entry per slice at exactly +-1 (so the slice's amax is that power of two), one slice zero."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8).view(dtype).float()
    v = torch.where(torch.isfinite(v) & (v.abs() <= 1), v, torch.zeros_like(v))
    m, k = shape
    if dim is None:
        v[m // 2, k // 3] = -1.0
        return (v * 2.0 ** 3).to(torch.bfloat16)
    along = 1 if dim in (1, -1) else 0  # the axis each scale covers
    n = shape[1 - along]
    exps = torch.randint(-4, 5, (n,), generator=g).float()
    index = torch.randint(0, shape[along], (n,), generator=g)
    if along == 1:
        v[torch.arange(n), index] = 1.0
        v[1] = 0.0
        return (v * 2.0 ** exps[:, None]).to(torch.bfloat16)
    v[index, torch.arange(n)] = -1.0
    v[:, 2] = 0.0
    return (v * 2.0 ** exps[None, :]).to(torch.bfloat16)


def same_bytes(a, b) -> bool:
    return a is not None and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def compare_all() -> dict:
    """Run in a child process with TRITON_INTERPRET=1 (read when @triton.jit decorates, so it must
    be set before the kernel module is imported)."""
    from helpers.precision import fp8_cast_gpu, recipes
    out = {}
    for fname, dtype in DTYPES.items():
        for gname, dim in DIMS.items():
            x = exact_input((70, 300), dtype, dim)  # 2 x 3 tiles of 64 x 128, both ragged
            want, want_inverse = recipes.scale_and_cast_to(x, FMAX, dtype, dim)
            q, qt, inverse = fp8_cast_gpu.scale_cast(x, FMAX, dtype, dim, plain=True, transposed=True)
            out[f"{fname}-{gname}"] = {
                "plain": same_bytes(q, want), "transposed": same_bytes(qt, want.t().contiguous()),
                "inverse": inverse.shape == want_inverse.shape and bool(torch.equal(inverse, want_inverse)),
                "reaches_max": float(q.float().abs().max()) == FMAX}
    x = exact_input((64, 128), torch.float8_e4m3fn, None)
    want, _ = recipes.scale_and_cast_to(x, FMAX, torch.float8_e4m3fn, None)
    q, qt, _ = fp8_cast_gpu.scale_cast(x, FMAX, torch.float8_e4m3fn, None, plain=True, transposed=False)
    out["plain_only"] = {"plain": same_bytes(q, want), "no_transposed": qt is None}
    q, qt, _ = fp8_cast_gpu.scale_cast(x, FMAX, torch.float8_e4m3fn, None, plain=False, transposed=True)
    out["transposed_only"] = {"transposed": same_bytes(qt, want.t().contiguous()), "no_plain": q is None}
    for name, scale in (("delayed", 32.0), ("delayed_saturating", 64.0)):  # amax 8: x * 32 <= 256, x * 64 clips
        x = exact_input((70, 300), torch.float8_e4m3fn, None)
        want = (x.float() * scale).clamp(-FMAX, FMAX).to(torch.float8_e4m3fn)
        amax_bits = torch.zeros((), dtype=torch.int32)
        q, qt = fp8_cast_gpu.delayed_cast(x, FMAX, torch.float8_e4m3fn, torch.tensor(scale), amax_bits, True, True)
        out[name] = {"plain": same_bytes(q, want), "transposed": same_bytes(qt, want.t().contiguous()),
                     "amax": float(amax_bits.view(torch.float32)) == float(x.float().abs().max()),
                     "at_max": int((q.float().abs() == FMAX).sum())}
    errors = {}
    cases = {"3d": (x[None], FMAX, torch.float8_e4m3fn, None), "dim": (x, FMAX, torch.float8_e4m3fn, 2)}
    for name, args in cases.items():
        try:
            fp8_cast_gpu.scale_cast(*args)
            errors[name] = None
        except ValueError as e:
            errors[name] = str(e)
    out["errors"] = errors
    return out


@pytest.fixture(scope="module")
def compared(triton_interpreter):
    return triton_interpreter(__file__)


@pytest.mark.parametrize("case", [f"{f}-{g}" for f in DTYPES for g in DIMS])
def test_kernel_matches_the_torch_quantiser_byte_for_byte(compared, case):
    assert compared[case] == {"plain": True, "transposed": True, "inverse": True, "reaches_max": True}


def test_delayed_kernel_casts_with_the_given_scale_and_measures_the_amax(compared):
    """Delayed scaling: the scale comes in, the tensor's amax goes out (atomic max of every tile's);
    a scale too large for this tensor saturates at the format's max instead of overflowing."""
    fits, saturating = compared["delayed"], compared["delayed_saturating"]
    for case in (fits, saturating):
        assert case["plain"] and case["transposed"] and case["amax"], case
    assert saturating["at_max"] > 2 * fits["at_max"]  # everything from half the amax up clips


def test_one_layout_at_a_time_and_bad_input_named(compared):
    assert compared["plain_only"] == {"plain": True, "no_transposed": True}
    assert compared["transposed_only"] == {"transposed": True, "no_plain": True}
    assert "takes a matrix" in compared["errors"]["3d"]
    assert "dim must be" in compared["errors"]["dim"]


if __name__ == "__main__":
    print(json.dumps(compare_all()))
