"""The dense GeLU MLP, fc2(GeLU(fc1(x))), as one autograd Function whose four GEMMs run in FP8 under
the delayed recipe, with the GeLU inside the FP8 casts (what Transformer Engine's LayerNormMLP and its
fused activation-cast kernels do; the kit replaces them with fp8_cast_gpu.delayed_cast's prologue).

Why one Function: with two FP8 linears around torch's GeLU, the activation is written in bf16, read
back by fc2's cast, and its gradient likewise for fc1's: four extra passes over the widest tensor of
the layer (tokens x ffn_hidden_size). Here the forward casts GeLU(h) straight from fc1's output h, and
the backward casts GeLU's input gradient straight from fc2's input gradient and h; h (bf16) is kept
for the backward, as torch's GeLU keeps it. Each op's bf16 rounding is kept: on the MLP's activations
the bytes equal the unfused path's (benchmarks/speed/fp8_gelu_mlp.py on the GPU); far in GeLU's negative
tail, where 1 + erf cancels, the kernel's erf can differ from torch's in the last bit, and so can a byte
(that script's byte check, docs/results/precision.md).

Each linear keeps its own two DelayedStreams (fp8_matmul.DelayedStreams): fc2's input stream measures
GeLU(h), fc1's gradient stream GeLU's input gradient, exactly the tensors the unfused path casts."""
from __future__ import annotations

import torch

from helpers.precision.fp8_matmul import DelayedStreams, quantize_weight, scaled_matmul, weight_gradient


class FP8GeluMLPFunction(torch.autograd.Function):
    """x [..., K] (bf16) -> GeLU(x fc1^T) fc2^T [..., K']; fc1 [F, K], fc2 [K', F]; `accumulate`: the
    weight gradients go into each weight's main_grad (Megatron's gradient_accumulation_fusion)."""

    @staticmethod
    def forward(ctx, x, fc1, fc2, streams1: DelayedStreams, streams2: DelayedStreams, accumulate: bool = False):
        ctx.x_shape, ctx.streams, ctx.accumulate = x.shape, (streams1, streams2), accumulate
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        xq, xq_t, xs = streams1.input.quantize(x2, transposed=True)
        w1q, w1q_t, w1s = quantize_weight(fc1, "e4m3", transposed=True)
        h = scaled_matmul(xq, w1q.t(), xs, w1s)  # fc1's output, the GeLU's input [M, F]
        aq, aq_t, as_ = streams2.input.quantize(h, transposed=True, prologue="gelu")
        w2q, w2q_t, w2s = quantize_weight(fc2, "e4m3", transposed=True)
        y = scaled_matmul(aq, w2q.t(), as_, w2s)
        ctx.save_for_backward(fc1, fc2, xq_t, xs, w1q_t, w1s, h, aq_t, as_, w2q_t, w2s)
        return y.reshape(*x.shape[:-1], fc2.shape[0])

    @staticmethod
    def backward(ctx, dy):
        fc1, fc2, xq_t, xs, w1q_t, w1s, h, aq_t, as_, w2q_t, w2s = ctx.saved_tensors
        streams1, streams2 = ctx.streams
        dy2 = dy.reshape(-1, dy.shape[-1]).contiguous()
        dyq, dyq_t, dys = streams2.grad_output.quantize(dy2, transposed=True)
        da = scaled_matmul(dyq, w2q_t.t(), dys, w2s)  # the gradient of GeLU's output [M, F]
        d_fc2 = weight_gradient(dyq_t, aq_t, dys, as_, fc2 if ctx.accumulate else None, dy.dtype)
        want_dx = ctx.needs_input_grad[0]
        dhq, dhq_t, dhs = streams1.grad_output.quantize(da, plain=want_dx, transposed=True,
                                                        prologue="gelu_backward", h=h)
        d_fc1 = weight_gradient(dhq_t, xq_t, dhs, xs, fc1 if ctx.accumulate else None, dy.dtype)
        dx = scaled_matmul(dhq, w1q_t.t(), dhs, w1s).reshape(ctx.x_shape) if want_dx else None
        return dx, d_fc1, d_fc2, None, None, None


def fp8_gelu_mlp(x: torch.Tensor, fc1: torch.Tensor, fc2: torch.Tensor, streams1: DelayedStreams,
                 streams2: DelayedStreams, accumulate: bool = False) -> torch.Tensor:
    return FP8GeluMLPFunction.apply(x, fc1, fc2, streams1, streams2, accumulate)
