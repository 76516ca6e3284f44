"""The MLP's GeLU with the FP8 cast of its result fused in, forward and backward (Triton, GPU).

Why the kit owns this (Transformer Engine fuses the same pairs in its own MLP): in an FP8 MLP,
FC2's input is GeLU(FC1's output) and FC1's output gradient is GeLU's backward, and each of them
is written in bf16 only to be read again at once by the FP8 quantiser of the next GEMM. Under
the delayed recipe the cast's scale is known before the tensor exists (fp8_matmul.DelayedStream),
so one kernel can compute the activation (or its gradient) and write it straight in FP8, in both
layouts the GEMMs want, measuring its amax on the way. For the 1.4B GPT's MLP (FFN 8192, micro
batch 16) that saves two bf16 passes over a [32768, 8192] matrix per direction: ~1 GB of memory
traffic per layer and microbatch each way.

The arithmetic is torch's formula: GeLU's exact form (erf) as ATen's CUDA kernel writes it, in
fp32, rounded to bf16 as torch's bf16 GeLU returns it, then the delayed cast of fp8_cast_gpu (the
same tail, `_record_amax_and_store`). Not bit for bit: Triton's `tl.exp` is the GPU's approximate
exp2 instruction (libdevice's exact one does not run in Triton's interpreter, where the CPU test
runs the kernels), and the compiler may contract other multiply-adds than nvcc does, so a value
can land one bf16 rounding away from torch's before the cast. benchmarks/gpu_precision.py counts
the FP8 bytes that differ on the GPU; tests/unit/test_fp8_gelu_cast_gpu.py checks the kernels in
Triton's interpreter on CPU."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from helpers.precision.fp8_cast_gpu import DELAYED_CAST_TILE, _record_amax_and_store, layouts

SQRT1_2 = tl.constexpr(0.7071067811865476)  # M_SQRT1_2 (constexpr: a kernel may read only those globals)
PDF_SCALE = tl.constexpr(0.3989422804014327)  # M_2_SQRTPI * M_SQRT1_2 * 0.5 = 1 / sqrt(2 pi), ATen's kBeta


@triton.jit
def _round_to_bf16(v):
    """fp32 -> the nearest bf16 (ties to even), kept in fp32: torch's bf16 result of an fp32
    computation. Written with integer operations rather than `.to(tl.bfloat16)` so that Triton's
    interpreter, whose float conversions truncate, rounds exactly as the GPU does (the CPU test
    compares against torch). NaN stays NaN; values past bf16's max round to infinity, as torch's."""
    bits = v.to(tl.uint32, bitcast=True)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).to(tl.float32, bitcast=True)
    return tl.where(v != v, v, rounded)


@triton.jit
def _gelu_delayed_cast_kernel(h_ptr, scale_ptr, amax_bits_ptr, q_ptr, qt_ptr, M, K, fmax,
                              PLAIN: tl.constexpr, TRANSPOSED: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_k = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_k * BK + tl.arange(0, BK)
    inside = (rows < M)[:, None] & (cols < K)[None, :]
    x = tl.load(h_ptr + rows[:, None].to(tl.int64) * K + cols[None, :], mask=inside, other=0.0).to(tl.float32)
    g = x * 0.5 * (1.0 + tl.math.erf(x * SQRT1_2))
    g = _round_to_bf16(g)  # torch's bf16 GeLU returns this rounding; the cast starts from it
    _record_amax_and_store(g, scale_ptr, amax_bits_ptr, q_ptr, qt_ptr, rows, cols, inside, M, K, fmax,
                           PLAIN, TRANSPOSED)


@triton.jit
def _gelu_backward_delayed_cast_kernel(dg_ptr, h_ptr, scale_ptr, amax_bits_ptr, q_ptr, qt_ptr, M, K, fmax,
                                       PLAIN: tl.constexpr, TRANSPOSED: tl.constexpr, BM: tl.constexpr,
                                       BK: tl.constexpr):
    pid_m, pid_k = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_k * BK + tl.arange(0, BK)
    inside = (rows < M)[:, None] & (cols < K)[None, :]
    offsets = rows[:, None].to(tl.int64) * K + cols[None, :]
    x = tl.load(h_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    dg = tl.load(dg_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    cdf = 0.5 * (1.0 + tl.math.erf(x * SQRT1_2))
    pdf = tl.exp(-0.5 * x * x) * PDF_SCALE
    dh = _round_to_bf16(dg * (cdf + x * pdf))  # torch's bf16 gelu_backward's rounding
    _record_amax_and_store(dh, scale_ptr, amax_bits_ptr, q_ptr, qt_ptr, rows, cols, inside, M, K, fmax,
                           PLAIN, TRANSPOSED)


def _check(*matrices):
    for m in matrices:
        if m.dim() != 2 or not m.is_contiguous():
            raise ValueError(f"fp8_gelu_cast_gpu takes contiguous matrices, got shape {tuple(m.shape)}")
    if len({m.shape for m in matrices}) != 1:
        raise ValueError(f"shapes differ: {[tuple(m.shape) for m in matrices]}")


def gelu_delayed_cast(h: torch.Tensor, fmax: float, dtype: torch.dtype, scale: torch.Tensor,
                      amax_bits: torch.Tensor, plain: bool = True, transposed: bool = False):
    """(row-major FP8 or None, transposed FP8 or None) of GeLU(h) for a bf16 matrix h, scaled by
    the fp32 scalar `scale` (fp8_cast_gpu.delayed_cast's contract, the GeLU computed on the way)."""
    _check(h)
    m, k = h.shape
    q, qt, q_arg, qt_arg = layouts(m, k, dtype, h.device, plain, transposed)
    bm, bk, warps = DELAYED_CAST_TILE
    _gelu_delayed_cast_kernel[triton.cdiv(m, bm), triton.cdiv(k, bk)](
        h, scale, amax_bits, q_arg, qt_arg, m, k, fmax, PLAIN=plain, TRANSPOSED=transposed, BM=bm, BK=bk,
        num_warps=warps)
    return q, qt


def gelu_backward_delayed_cast(dg: torch.Tensor, h: torch.Tensor, fmax: float, dtype: torch.dtype,
                               scale: torch.Tensor, amax_bits: torch.Tensor, plain: bool = True,
                               transposed: bool = False):
    """(row-major FP8 or None, transposed FP8 or None) of GeLU's input gradient dg * GeLU'(h),
    scaled by `scale`, its amax folded into `amax_bits`."""
    _check(dg, h)
    m, k = h.shape
    q, qt, q_arg, qt_arg = layouts(m, k, dtype, h.device, plain, transposed)
    bm, bk, warps = DELAYED_CAST_TILE
    _gelu_backward_delayed_cast_kernel[triton.cdiv(m, bm), triton.cdiv(k, bk)](
        dg, h, scale, amax_bits, q_arg, qt_arg, m, k, fmax, PLAIN=plain, TRANSPOSED=transposed, BM=bm, BK=bk,
        num_warps=warps)
    return q, qt
