"""One linear layer's three GEMMs in FP8 on `torch._scaled_mm`: y = x W^T (forward), dx = dy W
(input gradient, "dgrad") and dW = dy^T x (weight gradient, "wgrad"). Inputs and outputs stay
bf16; each GEMM quantises its two operands with current scaling (recipes.scale_and_cast) right
before it and accumulates in fp32 inside the tensor cores; the bf16 master weights and the fp32
gradient buffers of Megatron's optimizer are untouched.

  recipe      forward            dgrad              wgrad              saved for backward
  tensorwise  x e4m3, W e4m3     dy e5m2, W e4m3    dy e5m2, x e4m3    x in FP8 (+ its scale)
  rowwise     x e4m3, W e4m3     dy e4m3, W e4m3    dy e4m3, x e4m3    x in bf16
              (one scale per row of each operand along the GEMM's contraction dimension, so
              each GEMM quantises its own copy: W per output row forward, per input column for
              dgrad; x and dy per token forward/dgrad, per feature for wgrad)

Tensorwise follows Transformer Engine's "hybrid" format (gradients in e5m2, their wider range),
rowwise torchao's rowwise recipe (e4m3 throughout: a scale per row already covers the range).
`_scaled_mm` wants its first operand row-major and its second column-major, so the quantiser
writes an operand transposed where a GEMM needs that. Its dimensions must be multiples of 16 (checked before a
job starts: helpers/launch/precision_check.py). On the GPU the quantisation is compiled
(torch.compile fuses the amax, the scaling and the cast: unfused, they would cost more memory
traffic than FP8 saves)."""
from __future__ import annotations

import torch

from helpers.job.spec import FP8_RECIPES
from helpers.precision import formats, recipes

RECIPES = FP8_RECIPES  # the names JobSpec.fp8_recipe takes
GRAD_FORMAT = {"tensorwise": "e5m2", "rowwise": "e4m3"}
scaled_mm = torch._scaled_mm  # module attribute: the unit test swaps in an emulation for rowwise on CPU

_compiled = {}


def scaled_cast_layouts(x, fmax: float, dtype, dim, plain: bool, transposed: bool):
    """recipes.scale_and_cast_to, returning the FP8 matrix row-major (`plain`), its transpose
    made contiguous (`transposed`: what a GEMM needs as a column-major operand), or both, and the
    dequantisation scale. Compiled, both layouts come out of one pass over x."""
    q, inverse = recipes.scale_and_cast_to(x, fmax, dtype, dim)
    return (q if plain else None), (q.t().contiguous() if transposed else None), inverse


def quantize(x: torch.Tensor, fmt: str, dim: int | None = None, plain: bool = True, transposed: bool = False):
    """(row-major FP8 or None, transposed FP8 or None, fp32 dequantisation scale). On the GPU
    compiled (one graph for every shape: dynamic=True); unfused, the casts and transposes
    cost more memory traffic than FP8 saves."""
    f = formats.get(fmt)
    if x.device.type != "cuda":
        return scaled_cast_layouts(x, f.max, f.dtype, dim, plain, transposed)
    if "fn" not in _compiled:
        # Every (format, dim, layouts) combination is its own graph; torch's default limit (8)
        # was hit on the H200 and the rest ran eager. Inputs are detached: requires_grad would
        # double the graphs (the quantised copies need no autograd: FP8Matmul is the Function).
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 32)
        _compiled["fn"] = torch.compile(scaled_cast_layouts, dynamic=True)
    with torch.no_grad():
        return _compiled["fn"](x.detach(), f.max, f.dtype, dim, plain, transposed)


def _mm(a, b, scale_a, scale_b) -> torch.Tensor:
    return scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)


class FP8Matmul(torch.autograd.Function):
    """x [..., K] (bf16) @ weight [N, K]^T -> [..., N] (bf16), every GEMM in FP8. `_scaled_mm`
    takes its second operand column-major: W^T for the forward is W's row-major storage seen
    transposed; dgrad's W and wgrad's x are quantised straight into transposed storage."""

    @staticmethod
    def forward(ctx, x, weight, recipe):
        if recipe not in RECIPES:
            raise ValueError(f"unknown FP8 recipe {recipe!r}; known: {', '.join(RECIPES)}")
        ctx.recipe, ctx.x_shape = recipe, x.shape
        x2 = x.reshape(-1, x.shape[-1]).contiguous()  # [M, K]
        if recipe == "tensorwise":
            xq, xq_t, xs = quantize(x2, "e4m3", transposed=True)
            wq, _, ws = quantize(weight, "e4m3")
            y = _mm(xq, wq.t(), xs, ws)
            ctx.save_for_backward(xq_t, xs, weight)  # FP8 x (transposed for wgrad): half of bf16's bytes
        else:
            xq, _, xs = quantize(x2, "e4m3", dim=-1)  # [M, 1]: per token
            wq, _, ws = quantize(weight, "e4m3", dim=-1)  # [N, 1]: per output row
            y = _mm(xq, wq.t(), xs, ws.t().contiguous())
            ctx.save_for_backward(x2, weight)
        return y.reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        recipe = ctx.recipe
        gfmt = GRAD_FORMAT[recipe]
        dy2 = dy.reshape(-1, dy.shape[-1]).contiguous()  # [M, N]
        want_dx, want_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx = dw = None
        if recipe == "tensorwise":
            xq_t, xs, weight = ctx.saved_tensors
            dyq, dyq_t, dys = quantize(dy2, gfmt, plain=want_dx, transposed=want_dw)
            if want_dx:
                _, wq_t, ws = quantize(weight, "e4m3", plain=False, transposed=True)
                dx = _mm(dyq, wq_t.t(), dys, ws)
            if want_dw:
                dw = _mm(dyq_t, xq_t.t(), dys, xs)
        else:
            x2, weight = ctx.saved_tensors
            if want_dx:
                dyq, _, dys = quantize(dy2, gfmt, dim=-1)  # [M, 1]: per token, over N
                _, wq_t, ws = quantize(weight, "e4m3", dim=0, plain=False, transposed=True)  # [1, K]: per column
                dx = _mm(dyq, wq_t.t(), dys, ws)
            if want_dw:
                _, dyq_t, dys = quantize(dy2, gfmt, dim=0, plain=False, transposed=True)  # [1, N]: per feature
                _, xq_t, xs = quantize(x2, "e4m3", dim=0, plain=False, transposed=True)  # [1, K]: per feature
                dw = _mm(dyq_t, xq_t.t(), dys.t().contiguous(), xs)
        if dx is not None:
            dx = dx.reshape(ctx.x_shape)
        return dx, dw, None


def fp8_matmul(x: torch.Tensor, weight: torch.Tensor, recipe: str = "tensorwise") -> torch.Tensor:
    return FP8Matmul.apply(x, weight, recipe)
