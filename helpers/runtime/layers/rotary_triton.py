"""Megatron's rotate-half rotary embedding as one hand-written Triton kernel each way (GPU, bf16):
the kit's fastest stand-in for Transformer Engine's fused RoPE.

Why not only torch.compile (rotary.rotary): on the 1.4B GPT's query and key (views into
the QKV projection's output, seq 2048 x micro batch 16 x 16 heads x 128) the compiled kernels took
1.03 ms per layer forward + backward, 2.9x the 0.36 ms its bytes need at 3 TB/s
(benchmarks/speed/elementwise.py, H200, 2026-12-02), and both precisions pay it in every layer. Here
each program takes one sequence position and a block of (batch, head) rows: it computes that
position's cos and sin once, reads each row's two halves once (through the view's strides, no copy)
and writes the rotated row contiguous. The backward is the transposed rotation of the gradient
with the same cos and sin.

Arithmetic: Megatron's formula, t * cos + rotate_half(t) * sin with cos and sin of the fp32
frequencies scaled by mscale and rounded to bf16 first (as rope_utils does), then computed in
fp32 and rounded once to bf16 (as the compiled kernel does; eager torch rounds after each
product). tests/unit/test_rope_triton.py checks it in Triton's interpreter on CPU;
benchmarks/speed/elementwise.py times it and reports its largest difference from Megatron's."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

# (batch, head) rows of one position per program, and warps per program. Swept on the H200
# (2026-12-02, query + key of the 1.4B GPT, forward + backward, 4-64 rows x 1-8 warps;
# docs/results/gpu_profile.md): 0.29 ms per layer with 16 rows on 2 warps (8 rows on 2: the same),
# 0.70 ms with 16 rows on 4 warps.
ROWS_PER_PROGRAM, WARPS = 16, 2


@triton.jit
def _cos_sin(f_ptr, s, mscale, d, HALF: tl.constexpr):
    """cos and sin of both halves of position s's frequencies, times mscale, rounded to bf16."""
    f1 = tl.load(f_ptr + s * (2 * HALF) + d)
    f2 = tl.load(f_ptr + s * (2 * HALF) + HALF + d)
    c1 = (tl.cos(f1) * mscale).to(tl.bfloat16).to(tl.float32)
    s1 = (tl.sin(f1) * mscale).to(tl.bfloat16).to(tl.float32)
    c2 = (tl.cos(f2) * mscale).to(tl.bfloat16).to(tl.float32)
    s2 = (tl.sin(f2) * mscale).to(tl.bfloat16).to(tl.float32)
    return c1[None, :], s1[None, :], c2[None, :], s2[None, :]


@triton.jit
def _rope_kernel(x_ptr, f_ptr, o_ptr, R, H, stride_s, stride_b, stride_h, mscale,
                 BACKWARD: tl.constexpr, HALF: tl.constexpr, BR: tl.constexpr):
    """Forward: o1 = x1 c1 - x2 s1, o2 = x2 c2 + x1 s2. Backward (x is the output's gradient):
    o1 = x1 c1 + x2 s2, o2 = x2 c2 - x1 s1. Rows r = b * H + h of position s; o contiguous."""
    s = tl.program_id(0)
    rows = tl.program_id(1) * BR + tl.arange(0, BR)
    d = tl.arange(0, HALF)
    inside = (rows < R)[:, None]
    src = (s.to(tl.int64) * stride_s + (rows // H) * stride_b + (rows % H) * stride_h)[:, None] + d[None, :]
    x1 = tl.load(x_ptr + src, mask=inside, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + src + HALF, mask=inside, other=0.0).to(tl.float32)
    c1, s1, c2, s2 = _cos_sin(f_ptr, s, mscale, d, HALF)
    if BACKWARD:
        o1, o2 = x1 * c1 + x2 * s2, x2 * c2 - x1 * s1
    else:
        o1, o2 = x1 * c1 - x2 * s1, x2 * c2 + x1 * s2
    dst = (s.to(tl.int64) * R + rows)[:, None] * (2 * HALF) + d[None, :]
    tl.store(o_ptr + dst, o1.to(o_ptr.dtype.element_ty), mask=inside)
    tl.store(o_ptr + dst + HALF, o2.to(o_ptr.dtype.element_ty), mask=inside)


def _rotate(x: torch.Tensor, freqs: torch.Tensor, mscale: float, backward: bool) -> torch.Tensor:
    s, b, h, dim = x.shape
    out = torch.empty((s, b, h, dim), dtype=x.dtype, device=x.device)
    rows = b * h
    _rope_kernel[(s, triton.cdiv(rows, ROWS_PER_PROGRAM))](
        x, freqs, out, rows, h, x.stride(0), x.stride(1), x.stride(2), float(mscale),
        BACKWARD=backward, HALF=dim // 2, BR=ROWS_PER_PROGRAM, num_warps=WARPS)
    return out


class TritonRotary(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, freqs, mscale):
        ctx.save_for_backward(freqs)
        ctx.mscale = mscale
        return _rotate(t, freqs, mscale, backward=False)

    @staticmethod
    def backward(ctx, grad):
        (freqs,) = ctx.saved_tensors
        if grad.stride(-1) != 1:
            grad = grad.contiguous()
        return _rotate(grad, freqs, ctx.mscale, backward=True), None, None


def applies(t: torch.Tensor, freqs: torch.Tensor) -> bool:
    """Whether the kernel covers this call: bf16 t [s, b, heads, dim] with its last dimension
    contiguous, fp32 freqs [s, 1, 1, dim] contiguous over the whole head (no partial rotary), dim
    a power of two of at least 16. Anything else goes to the compiled rotary."""
    dim = t.shape[-1]
    return (t.dim() == 4 and t.dtype == torch.bfloat16 and t.stride(-1) == 1 and freqs.dtype == torch.float32
            and freqs.is_contiguous() and tuple(freqs.shape) == (t.shape[0], 1, 1, dim)
            and dim >= 16 and dim & (dim - 1) == 0)


def rotary(t: torch.Tensor, freqs: torch.Tensor, mscale: float) -> torch.Tensor:
    return TritonRotary.apply(t, freqs, mscale)
