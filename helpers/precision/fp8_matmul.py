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
`_scaled_mm` wants its first operand row-major and its second column-major, hence the
`.t().contiguous().t()` copies below. Its dimensions must be multiples of 16 (checked before a
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


def quantize(x: torch.Tensor, fmt: str, dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """recipes.scale_and_cast; compiled on the GPU (one graph for every shape: dynamic=True)."""
    f = formats.get(fmt)
    if x.device.type != "cuda":
        return recipes.scale_and_cast_to(x, f.max, f.dtype, dim)
    if "fn" not in _compiled:
        _compiled["fn"] = torch.compile(recipes.scale_and_cast_to, dynamic=True)
    return _compiled["fn"](x, f.max, f.dtype, dim)


def column_major(t: torch.Tensor) -> torch.Tensor:
    """The same matrix with column-major storage (what `_scaled_mm` wants as its second operand)."""
    return t.t().contiguous().t()


def _mm(a, b, scale_a, scale_b) -> torch.Tensor:
    return scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)


class FP8Matmul(torch.autograd.Function):
    """x [..., K] (bf16) @ weight [N, K]^T -> [..., N] (bf16), every GEMM in FP8."""

    @staticmethod
    def forward(ctx, x, weight, recipe):
        if recipe not in RECIPES:
            raise ValueError(f"unknown FP8 recipe {recipe!r}; known: {', '.join(RECIPES)}")
        ctx.recipe, ctx.x_shape = recipe, x.shape
        x2 = x.reshape(-1, x.shape[-1]).contiguous()  # _scaled_mm: row-major first operand
        if recipe == "tensorwise":
            xq, xs = quantize(x2, "e4m3")
            wq, ws = quantize(weight, "e4m3")
            y = _mm(xq, wq.t(), xs, ws)
            ctx.save_for_backward(xq, xs, weight)  # FP8 x: half the bytes of bf16 until backward
        else:
            xq, xs = quantize(x2, "e4m3", dim=-1)  # [M, 1]: per token
            wq, ws = quantize(weight, "e4m3", dim=-1)  # [N, 1]: per output row
            y = _mm(xq, wq.t(), xs, ws.t().contiguous())
            ctx.save_for_backward(x2, weight)
        return y.reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        recipe = ctx.recipe
        gfmt = GRAD_FORMAT[recipe]
        dy2 = dy.reshape(-1, dy.shape[-1]).contiguous()
        dx = dw = None
        if recipe == "tensorwise":
            xq, xs, weight = ctx.saved_tensors
            dyq, dys = quantize(dy2, gfmt)
            if ctx.needs_input_grad[0]:
                wq, ws = quantize(weight, "e4m3")
                dx = _mm(dyq, column_major(wq), dys, ws)
            if ctx.needs_input_grad[1]:
                dw = _mm(dyq.t().contiguous(), column_major(xq), dys, xs)
        else:
            x2, weight = ctx.saved_tensors
            if ctx.needs_input_grad[0]:
                dyq, dys = quantize(dy2, gfmt, dim=-1)  # [M, 1]: per token, over N
                wq, ws = quantize(weight, "e4m3", dim=0)  # [1, K]: per input column, over N
                dx = _mm(dyq, column_major(wq), dys, ws)
            if ctx.needs_input_grad[1]:
                dyq, dys = quantize(dy2, gfmt, dim=0)  # [1, N]: per output feature, over tokens
                xq, xs = quantize(x2, "e4m3", dim=0)  # [1, K]: per input feature, over tokens
                dw = _mm(dyq.t().contiguous(), column_major(xq), dys.t().contiguous(), xs)
        if dx is not None:
            dx = dx.reshape(ctx.x_shape)
        return dx, dw, None


def fp8_matmul(x: torch.Tensor, weight: torch.Tensor, recipe: str = "tensorwise") -> torch.Tensor:
    return FP8Matmul.apply(x, weight, recipe)
