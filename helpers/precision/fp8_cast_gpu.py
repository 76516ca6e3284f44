"""The FP8 quantiser of the training path as one Triton kernel: scale, saturate and cast a bf16
matrix to e4m3/e5m2, writing it row-major, transposed, or both, in one pass over the input.

Why the kit owns this (it replaces what Transformer Engine's cast/transpose kernels do): every FP8
GEMM needs its two operands quantised right before it, and `_scaled_mm` wants the second one
column-major, so the weight gradient needs x and dy transposed as well. Written as torch
operations, the quantiser is an fp32 copy, an abs, a reduction, a multiply, a clamp, a cast and a
transposing copy: seven passes over memory. On the H200 that costs more than FP8 saves (one FC1-sized
linear: 1.7 ms in FP8 against 1.0 ms in bf16, measured with benchmarks/speed/precision.py); torch.compile
with dynamic shapes fused it only partly (its full reduction to one amax ran at a fraction of memory
bandwidth). Here the amax is one torch reduction (`vector_norm(ord=inf)`, no materialised abs) and
everything else one kernel: each program loads a tile once, scales it in fp32, and stores it in
both layouts (the transposed store goes through shared memory, so both stores are coalesced).

The arithmetic is recipes.scale_and_cast_to's, operation for operation (scale = max / amax in fp32
the way torch divides a number by a tensor, 1 where amax is 0; clamp; round-to-nearest-even cast;
dequantisation multiplier 1 / scale), so the two agree bit for bit: benchmarks/speed/precision.py
counts the differing bytes on the GPU; tests/unit/test_fp8_cast_gpu.py runs the kernel in Triton's
interpreter on CPU on values that need no rounding (the interpreter's own FP8 rounding is not the
GPU's: it does not carry a rounded-up mantissa into the exponent).

Scale granularity (`dim`): None, one scale for the matrix (tensorwise); -1/1, one per row; 0, one
per column (the rowwise recipe scales along each GEMM's contraction dimension).

`delayed_cast` is the delayed recipe's kernel: the scale comes from earlier steps
(fp8_matmul.DelayedStream), so no reduction runs before it, one launch per tensor instead of two,
and the tensor's amax is measured in the same pass for the steps after. It can also compute the
value it casts from the op that produces it (GeLU, or GeLU's backward: its `prologue`), so the dense
MLP's activation and its gradient are never written in bf16 and read back
(helpers/precision/fp8_gelu_mlp.py)."""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# (BLOCK_M, BLOCK_K, warps) per kernel: a tile of BLOCK_M rows of BLOCK_K values per program.
# benchmarks/speed/fp8_cast_tiles.py on the H200 (2026-12-01, the 1.4B GPT's operands at micro batch
# 16) timed the delayed cast 7% faster alone with 64 x 64 tiles (1349 us per layer against 1456)
# and the current-scaling cast 2% slower; training steps with 64 x 64 tiles were only measured on
# other machines than their 64 x 128 references, so they do not decide it (docs/results/gpu_profile.md):
# 64 x 128 stays, the tile of the fastest step measured, until a same-machine A/B.
SCALE_CAST_TILE = (64, 128, 4)
DELAYED_CAST_TILE = (64, 128, 4)
# The casts that compute GeLU or its gradient first are bound by instructions (the erf), not memory:
# smaller tiles keep more programs in flight. benchmarks/speed/fp8_gelu_mlp.py --kernels on one H100
# (2026-12-07, [16384, 8192], no clamp: SATURATE): GeLU + cast 259 us with 32 x 128, 271 with 32 x 64,
# 301 with 64 x 128; its backward + cast 335, 340, 470 (torch's GeLU then the plain cast: 192 + 195 us,
# backward 268 + 195). Folding each program's amax over a strip of 2-8 tiles before its one atomic
# (fewer same-address atomics) was slower or within 1%.
PROLOGUE_CAST_TILE = (32, 128, 4)
# Under Triton's CPU interpreter (the unit tests) the FP8 conversion does not saturate by itself.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
PER_TENSOR, PER_ROW, PER_COLUMN = 0, 1, 2


@triton.jit
def _scale_of(amax, fmax):
    """The scale and its inverse as torch computes them in recipes.scale_and_cast_to: `fmax / amax`
    with a tensor is torch's reciprocal-then-multiply (two roundings), `1.0 / scale` a reciprocal;
    both correctly rounded (Triton's `/` is an approximate division on the GPU, hence div_rn).
    1 where amax is 0."""
    amax = amax.to(tl.float32)
    one = tl.zeros_like(amax) + 1.0
    scale = tl.where(amax > 0, tl.div_rn(one, amax) * fmax, 1.0)
    return scale, tl.div_rn(one, scale)


@triton.jit
def _saturate(x, fmax):
    """torch's clamp(-fmax, fmax): NaN stays NaN (Triton's minimum/maximum would return the other
    operand, so a NaN would become a finite -fmax and hide a diverged run from the NaN checks)."""
    return tl.clamp(x, -fmax, fmax, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _scale_cast_kernel(x_ptr, amax_ptr, q_ptr, qt_ptr, inverse_ptr, M, K, fmax,
                       GRANULARITY: tl.constexpr, PLAIN: tl.constexpr, TRANSPOSED: tl.constexpr,
                       BM: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_k = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_k * BK + tl.arange(0, BK)
    row_in, col_in = rows < M, cols < K
    inside = row_in[:, None] & col_in[None, :]
    x = tl.load(x_ptr + rows[:, None].to(tl.int64) * K + cols[None, :], mask=inside, other=0.0).to(tl.float32)
    if GRANULARITY == 0:  # one scale; program (0, 0) writes its inverse
        scale, inverse = _scale_of(tl.load(amax_ptr), fmax)
        if (pid_m == 0) & (pid_k == 0):
            tl.store(inverse_ptr, inverse)
        scaled = x * scale
    elif GRANULARITY == 1:  # one per row; the first column of programs writes them
        scale, inverse = _scale_of(tl.load(amax_ptr + rows, mask=row_in, other=1.0), fmax)
        if pid_k == 0:
            tl.store(inverse_ptr + rows, inverse, mask=row_in)
        scaled = x * scale[:, None]
    else:  # one per column; the first row of programs writes them
        scale, inverse = _scale_of(tl.load(amax_ptr + cols, mask=col_in, other=1.0), fmax)
        if pid_m == 0:
            tl.store(inverse_ptr + cols, inverse, mask=col_in)
        scaled = x * scale[None, :]
    q = _saturate(scaled, fmax).to(q_ptr.dtype.element_ty)
    if PLAIN:
        tl.store(q_ptr + rows[:, None].to(tl.int64) * K + cols[None, :], q, mask=inside)
    if TRANSPOSED:  # the tile transposed, so that consecutive threads store consecutive bytes
        tl.store(qt_ptr + cols[:, None].to(tl.int64) * M + rows[None, :], tl.trans(q), mask=tl.trans(inside))


@triton.jit
def _gelu_of(h):
    """GeLU (erf form: torch's F.gelu and Megatron's default) in fp32, as torch's GeLU kernel computes it."""
    return h * 0.5 * (1.0 + tl.math.erf(h * 0.7071067811865476))


@triton.jit
def _gelu_backward_of(dy, h):
    """d GeLU(h) / dh times dy, as torch's GeluBackward kernel computes it (fp32)."""
    cdf = 0.5 * (1.0 + tl.math.erf(h * 0.7071067811865476))
    pdf = tl.math.exp(-0.5 * h * h) * 0.3989422804014327  # 1 / sqrt(2 pi)
    return dy * (cdf + h * pdf)


@triton.jit
def _delayed_cast_kernel(x_ptr, h_ptr, scale_ptr, amax_bits_ptr, q_ptr, qt_ptr, M, K, fmax,
                         PROLOGUE: tl.constexpr, PLAIN: tl.constexpr, TRANSPOSED: tl.constexpr,
                         EVEN: tl.constexpr, SATURATE: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr):
    """Delayed scaling: the scale is given (from earlier steps' amaxes), so there is no reduction
    before the cast; the tensor's own amax is measured on the way, each tile's folded in with one
    integer atomic max (non-negative floats order like their bit patterns, and a NaN's above
    inf's, so a NaN is kept). PROLOGUE: the elementwise op whose bf16 output is cast, computed here
    instead of in a pass of its own (0 none, 1 GeLU(x), 2 GeLU's backward of the gradient x at the
    input h); its value is rounded to bf16 first, as the op's own output would be. EVEN: the matrix
    is a whole number of tiles, so no loads or stores are masked (with the GeLU's erf the kernel is
    bound by instructions, not memory). SATURATE: clamp to +-fmax before the cast, as torch's recipe
    does; on the GPU Triton's conversion is PTX's `cvt.rn.satfinite` (out-of-range values and
    infinities to the largest finite value, NaN kept), which gives the same bytes without the clamp's
    instructions, so only Triton's CPU interpreter (whose conversion does not saturate) needs it."""
    pid_m, pid_k = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_k * BK + tl.arange(0, BK)
    inside = (rows < M)[:, None] & (cols < K)[None, :]
    offsets = rows[:, None].to(tl.int64) * K + cols[None, :]
    if EVEN:
        x = tl.load(x_ptr + offsets).to(tl.float32)
    else:
        x = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    if PROLOGUE == 1:
        x = _gelu_of(x).to(tl.bfloat16).to(tl.float32)
    elif PROLOGUE == 2:
        if EVEN:
            h = tl.load(h_ptr + offsets).to(tl.float32)
        else:
            h = tl.load(h_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
        x = _gelu_backward_of(x, h).to(tl.bfloat16).to(tl.float32)
    tl.atomic_max(amax_bits_ptr, tl.max(tl.max(tl.abs(x).to(tl.int32, bitcast=True), axis=1), axis=0))
    scaled = x * tl.load(scale_ptr)
    if SATURATE:
        scaled = _saturate(scaled, fmax)
    q = scaled.to(q_ptr.dtype.element_ty)
    transposed_offsets = cols[:, None].to(tl.int64) * M + rows[None, :]
    if EVEN:
        if PLAIN:
            tl.store(q_ptr + offsets, q)
        if TRANSPOSED:
            tl.store(qt_ptr + transposed_offsets, tl.trans(q))
    else:
        if PLAIN:
            tl.store(q_ptr + offsets, q, mask=inside)
        if TRANSPOSED:
            tl.store(qt_ptr + transposed_offsets, tl.trans(q), mask=tl.trans(inside))


PROLOGUES = {None: 0, "gelu": 1, "gelu_backward": 2}


def _layouts(m, k, dtype, device, plain, transposed):
    q = torch.empty((m, k), dtype=dtype, device=device) if plain else None
    qt = torch.empty((k, m), dtype=dtype, device=device) if transposed else None
    # an unused layout still needs a pointer of the FP8 type: the other one's (never written)
    return q, qt, (q if plain else qt), (qt if transposed else q)


def delayed_cast(x: torch.Tensor, fmax: float, dtype: torch.dtype, scale: torch.Tensor, amax_bits: torch.Tensor,
                 plain: bool = True, transposed: bool = False, prologue: str | None = None,
                 h: torch.Tensor | None = None):
    """(row-major FP8 or None, transposed FP8 or None) of a 2-D matrix scaled by the fp32 scalar
    `scale`, saturating at fmax; folds max |x| into `amax_bits` (an int32 scalar holding a
    non-negative float32's bits: read it with .view(torch.float32)). With `prologue` "gelu" the
    matrix cast is GeLU(x); with "gelu_backward", GeLU's input gradient for the output gradient x
    at the input `h` (same shape): what a fused activation-cast kernel of Transformer Engine writes."""
    if x.dim() != 2:
        raise ValueError(f"fp8_cast_gpu.delayed_cast takes a matrix, got shape {tuple(x.shape)}")
    if prologue not in PROLOGUES:
        raise ValueError(f"unknown prologue {prologue!r}; known: {', '.join(map(str, PROLOGUES))}")
    if (prologue == "gelu_backward") != (h is not None):
        raise ValueError("the gelu_backward prologue needs the GeLU's input h, and only it takes one")
    x = x.contiguous()
    if h is not None:
        if h.shape != x.shape:
            raise ValueError(f"h has shape {tuple(h.shape)}, the gradient {tuple(x.shape)}")
        h = h.contiguous()
    m, k = x.shape
    q, qt, q_arg, qt_arg = _layouts(m, k, dtype, x.device, plain, transposed)
    bm, bk, warps = DELAYED_CAST_TILE if prologue is None else PROLOGUE_CAST_TILE
    _delayed_cast_kernel[triton.cdiv(m, bm), triton.cdiv(k, bk)](
        x, x if h is None else h, scale, amax_bits, q_arg, qt_arg, m, k, fmax, PROLOGUE=PROLOGUES[prologue],
        PLAIN=plain, TRANSPOSED=transposed, EVEN=m % bm == 0 and k % bk == 0, SATURATE=INTERPRETED,
        BM=bm, BK=bk, num_warps=warps)
    return q, qt


def scale_cast(x: torch.Tensor, fmax: float, dtype: torch.dtype, dim: int | None, plain: bool = True,
               transposed: bool = False):
    """(row-major FP8 or None, transposed FP8 or None, fp32 dequantisation multiplier) of a 2-D
    matrix: the layouts fp8_matmul.quantize returns, shaped like scale_and_cast_to's (the
    multiplier is a scalar, [M, 1] or [1, K])."""
    if x.dim() != 2:
        raise ValueError(f"fp8_cast_gpu.scale_cast takes a matrix, got shape {tuple(x.shape)}")
    x = x.contiguous()
    m, k = x.shape
    if dim is None:
        granularity, amax = PER_TENSOR, torch.linalg.vector_norm(x, float("inf"))
        inverse = torch.empty((), dtype=torch.float32, device=x.device)
    elif dim in (1, -1):
        granularity, amax = PER_ROW, torch.linalg.vector_norm(x, float("inf"), dim=1, keepdim=True)
        inverse = torch.empty((m, 1), dtype=torch.float32, device=x.device)
    elif dim == 0:
        granularity, amax = PER_COLUMN, torch.linalg.vector_norm(x, float("inf"), dim=0, keepdim=True)
        inverse = torch.empty((1, k), dtype=torch.float32, device=x.device)
    else:
        raise ValueError(f"dim must be None, 0, 1 or -1, got {dim}")
    q, qt, q_arg, qt_arg = _layouts(m, k, dtype, x.device, plain, transposed)
    bm, bk, warps = SCALE_CAST_TILE
    _scale_cast_kernel[triton.cdiv(m, bm), triton.cdiv(k, bk)](
        x, amax.contiguous(), q_arg, qt_arg, inverse, m, k, fmax, GRANULARITY=granularity, PLAIN=plain,
        TRANSPOSED=transposed, BM=bm, BK=bk, num_warps=warps)
    return q, qt, inverse
