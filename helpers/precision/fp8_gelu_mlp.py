"""A dense MLP, FC2(GeLU(FC1(x))), as one autograd Function with FP8 GEMMs and the delayed
recipe, so that GeLU and the FP8 cast after it run as one kernel in both directions.

Two FP8Matmul calls with torch's GeLU between them (what the kit's FP8 linears do on their own)
write GeLU's output in bf16 and quantise it for FC2, and in backward write GeLU's input gradient
in bf16 and quantise it for FC1's two gradient GEMMs. An autograd Function can only hand bf16
tensors to the next one, so the fusion needs FC1, GeLU and FC2 in one Function: GeLU's result
goes into FC2's input stream with DelayedStream.quantize_produced (GELU), its gradient into
FC1's output-gradient stream (GELU_BACKWARD); on the GPU each is one Triton kernel
(fp8_gelu_cast_gpu). Everything else is FP8Matmul's, call for call: the same streams, the same
per-step weight copies (quantize_weight), the same GEMMs, so on the CPU (where the producers
run in torch) the result is bit for bit that of FC1 and FC2 as separate FP8 linears
(tests/unit/test_fp8_gelu_mlp.py).

Saved for backward: x and GeLU's output in FP8 transposed (the weight gradients' operands), both
weights' FP8 copies for the input gradients, and FC1's bf16 output h (GeLU's backward needs it;
torch's GeLU saves the same tensor)."""
from __future__ import annotations

import torch

from helpers.precision.fp8_matmul import GELU, GELU_BACKWARD, DelayedStreams, _mm, quantize_weight


class FP8GeluMLP(torch.autograd.Function):
    """x [..., K] (bf16), fc1 weight [F, K], fc2 weight [N, F] -> [..., N] (bf16)."""

    @staticmethod
    def forward(ctx, x, w1, w2, fc1: DelayedStreams, fc2: DelayedStreams):
        ctx.x_shape, ctx.streams = x.shape, (fc1, fc2)
        x2 = x.reshape(-1, x.shape[-1]).contiguous()  # [M, K]
        xq, xq_t, xs = fc1.input.quantize(x2, transposed=True)
        w1q, w1q_t, w1s = quantize_weight(w1, "e4m3", transposed=True)
        h = _mm(xq, w1q.t(), xs, w1s)  # [M, F]: FC1's output, GeLU's input
        gq, gq_t, gs = fc2.input.quantize_produced(GELU, (h,), transposed=True)
        w2q, w2q_t, w2s = quantize_weight(w2, "e4m3", transposed=True)
        y = _mm(gq, w2q.t(), gs, w2s)
        ctx.save_for_backward(xq_t, xs, w1q_t, w1s, h, gq_t, gs, w2q_t, w2s)
        return y.reshape(*x.shape[:-1], w2.shape[0])

    @staticmethod
    def backward(ctx, dy):
        xq_t, xs, w1q_t, w1s, h, gq_t, gs, w2q_t, w2s = ctx.saved_tensors
        fc1, fc2 = ctx.streams
        want_dx, want_dw1, want_dw2 = ctx.needs_input_grad[:3]
        dy2 = dy.reshape(-1, dy.shape[-1]).contiguous()  # [M, N]
        dyq, dyq_t, dys = fc2.grad_output.quantize(dy2, plain=True, transposed=want_dw2)
        dg = _mm(dyq, w2q_t.t(), dys, w2s)  # [M, F]: GeLU's output gradient
        dw2 = _mm(dyq_t, gq_t.t(), dys, gs) if want_dw2 else None
        dx = dw1 = None
        if want_dx or want_dw1:
            dhq, dhq_t, dhs = fc1.grad_output.quantize_produced(GELU_BACKWARD, (dg, h), plain=want_dx,
                                                                transposed=want_dw1)
            if want_dx:
                dx = _mm(dhq, w1q_t.t(), dhs, w1s).reshape(ctx.x_shape)
            if want_dw1:
                dw1 = _mm(dhq_t, xq_t.t(), dhs, xs)
        return dx, dw1, dw2, None, None


def fp8_gelu_mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, fc1: DelayedStreams,
                 fc2: DelayedStreams) -> torch.Tensor:
    return FP8GeluMLP.apply(x, w1, w2, fc1, fc2)
